//! Compiles `proto/offload.proto` with protox, so our own protocol needs
//! no system `protoc` (etcd-client's build, a dependency's, still does).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/offload.proto");
    let fds = protox::compile(["offload.proto"], ["proto"])?;
    tonic_prost_build::compile_fds(fds)?;
    Ok(())
}
