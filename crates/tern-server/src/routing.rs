//! Routing a pipelined batch of requests in cluster mode: each request's
//! keys against one view of the topology (`crate::cluster::view`), giving
//! it a redirect instead of running it, or marking it for a pull of keys
//! the node does not have yet.

use crate::cluster::view::{Route, View};
use crate::cluster::ClusterNode;

/// The route of request `req` under `view`; `None` for a request without
/// keys (or with the wrong number of arguments, which it reports itself).
fn request_route(view: &View, req: &crate::exec::Request) -> Option<Route> {
    use crate::commands::table::{arity_ok, COMMANDS};
    let spec = req.cmd.and_then(|i| COMMANDS.get(i))?;
    if !crate::commands::has_keys(spec) || !arity_ok(spec.arity, req.args.len()) {
        return None;
    }
    let keys = crate::commands::key_positions(spec, &req.args)
        .filter_map(|i| req.args.get(i))
        .map(|k| k.as_slice());
    Some(view.route(keys))
}

/// Whether a request of the batch touches a slot in handoff to this node
/// (worth waiting a moment for the previous owner to let go).
pub fn must_wait(view: &View, requests: &std::collections::VecDeque<crate::exec::Request>) -> bool {
    requests
        .iter()
        .any(|r| matches!(request_route(view, r), Some(Route::Wait { .. })))
}

/// Routes a batch of requests with one view: a request whose keys this
/// node does not serve gets its redirect (`-MOVED`, `-CROSSSLOT`,
/// `-CLUSTERDOWN`, `-TRYAGAIN`) as its reply instead of running. Returns
/// the requests (index, source node) whose keys may have to be pulled
/// from a previous owner first. While `fresh` is false (the node's
/// registration may have lapsed) every keyed request is refused.
/// `ASKING` changes nothing: ownership moves before data here, so the
/// owner serves every slot it has, moving or not.
pub fn route_batch(
    node: &ClusterNode,
    view: &View,
    fresh: bool,
    requests: &mut std::collections::VecDeque<crate::exec::Request>,
) -> Vec<(usize, usize)> {
    let mut pulls = Vec::new();
    for (i, req) in requests.iter_mut().enumerate() {
        let Some(route) = request_route(view, req) else {
            continue;
        };
        let refusal = match route {
            // A node that may have been deposed serves no keys.
            _ if !fresh => Some(ClusterNode::fenced_reply()),
            Route::Pull { source, .. } => {
                pulls.push((i, source));
                None
            }
            Route::Here => {
                if let Some(k) = first_key(req) {
                    node.hot.touch(k);
                }
                None
            }
            r => view.refusal(r),
        };
        if let Some(reply) = refusal {
            req.redirect = Some(reply);
            req.class = crate::exec::Class::Inline;
        }
    }
    pulls
}

/// The first key of request `req`.
fn first_key(req: &crate::exec::Request) -> Option<&[u8]> {
    let spec = req
        .cmd
        .and_then(|i| crate::commands::table::COMMANDS.get(i))?;
    crate::commands::key_positions(spec, &req.args)
        .next()
        .and_then(|i| req.args.get(i))
        .map(|k| k.as_slice())
}

/// The keys of request `req`.
pub fn request_keys(req: &crate::exec::Request) -> Vec<Vec<u8>> {
    use crate::commands::table::COMMANDS;
    let Some(spec) = req.cmd.and_then(|i| COMMANDS.get(i)) else {
        return Vec::new();
    };
    crate::commands::key_positions(spec, &req.args)
        .filter_map(|i| req.args.get(i).cloned())
        .collect()
}

/// Whether any request of the batch names keys (a batch without keys
/// need not hold the view while it runs: nothing in it depends on who owns
/// what).
pub fn any_keyed(requests: &std::collections::VecDeque<crate::exec::Request>) -> bool {
    use crate::commands::table::COMMANDS;
    requests.iter().any(|r| {
        r.cmd
            .and_then(|i| COMMANDS.get(i))
            .is_some_and(crate::commands::has_keys)
    })
}
