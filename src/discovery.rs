//! Seed discovery by DNS: a name (a Kubernetes headless Service, say) resolved now and then,
//! its addresses handed to the node as seeds. The node announces itself to any seed that is not
//! a member, so new pods are found as soon as DNS lists them.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::node::Command;

/// Resolves `name` (`host:port`) every `every` until `shutdown` or until the node is gone,
/// sending each non-empty, changed answer to the node. Lookup failures are logged and
/// retried on the next tick; the node keeps its last seeds meanwhile.
pub async fn resolve_seeds_periodically(
    name: String,
    every: Duration,
    node: mpsc::Sender<Command>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(every);
    let mut last: Vec<SocketAddr> = Vec::new();
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => return,
            _ = tick.tick() => {}
        }
        match tokio::net::lookup_host(name.as_str()).await {
            Ok(found) => {
                let mut seeds: Vec<SocketAddr> = found.collect();
                seeds.sort_unstable();
                seeds.dedup();
                if !seeds.is_empty() && seeds != last {
                    tracing::info!(%name, seeds = ?seeds, "discovered seeds");
                    last = seeds.clone();
                    if node.send(Command::DiscoveredSeeds(seeds)).await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => tracing::warn!(%name, error = %e, "seed lookup failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_and_stops_on_shutdown() {
        let (tx, mut rx) = mpsc::channel(4);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(resolve_seeds_periodically(
            "127.0.0.1:7946".into(),
            Duration::from_millis(20),
            tx,
            async {
                let _ = stopped.await;
            },
        ));
        let Some(Command::DiscoveredSeeds(seeds)) = rx.recv().await else {
            panic!("no seeds sent");
        };
        assert_eq!(seeds, vec!["127.0.0.1:7946".parse().unwrap()]);
        // The same answer is not sent again.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), rx.recv())
                .await
                .is_err()
        );
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("stops")
            .unwrap();
    }
}
