use clap::Parser;
use hearth_api::names::controllers::DISCOVERY;
use hearth_discovery::config::Args;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { common, config } = Args::parse();
    hearth_runtime::run(DISCOVERY, common, |rt| async move {
        hearth_discovery::controller::run(rt, config).await;
        Ok(())
    })
    .await
}
