//! Compiles `proto/offload.proto` with protox, so building needs no
//! system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/offload.proto");
    let fds = protox::compile(["offload.proto"], ["proto"])?;
    tonic_prost_build::compile_fds(fds)?;
    Ok(())
}
