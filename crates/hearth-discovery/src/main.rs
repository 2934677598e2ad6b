mod config;

use clap::Parser;
use hearth_api::names::controllers::DISCOVERY;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config::Args { common, config } = config::Args::parse();
    hearth_runtime::run(DISCOVERY, common, |rt| async move {
        // The controller goes here; until then the binary only proves its wiring.
        tracing::info!(?config, "configuration");
        rt.readiness().gate("startup").ready();
        rt.shutdown().cancelled().await;
        Ok(())
    })
    .await
}
