//! fencelock's metrics served for Prometheus: `GET http://ADDR/metrics`.
//!
//! ```sh
//! cargo run -p fencelock --features metrics --example prometheus -- redis://127.0.0.1:6379 127.0.0.1:9464
//! curl -s http://127.0.0.1:9464/metrics | grep fencelock_
//! ```
//!
//! It takes the lock `prometheus-example-lock` and leads an election named `prometheus-example`, so that
//! `fencelock_holds{kind="mutex"} 1`, `fencelock_leader{election="prometheus-example"} 1` and
//! the term appear, prints `serving` once they are in, and holds both until stdin closes.

use std::net::SocketAddr;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::AsyncReadExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:9464".into())
        .parse()?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;

    let client = fencelock::Client::connect(&url).await?;
    let guard = client.lock("prometheus-example-lock").acquire().await?;
    let leadership = client
        .election("prometheus-example")
        .campaign("example")
        .await?;
    println!(
        "serving on http://{addr}/metrics (term {})",
        leadership.term()
    );
    // Hold until stdin closes (a test closes it; a person presses Ctrl-D).
    let mut rest = Vec::new();
    tokio::io::stdin().read_to_end(&mut rest).await?;
    leadership.resign().await?;
    guard.release().await?;
    client.close().await?;
    Ok(())
}
