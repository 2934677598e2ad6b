use clap::Parser;
use hearth_api::names::controllers::LOCK_MANAGER;
use hearth_lock_manager::{config, controller};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config::Args { common, config } = config::Args::parse();
    hearth_runtime::run(LOCK_MANAGER, common, |rt| async move {
        controller::run(rt, config).await?;
        Ok(())
    })
    .await
}
