use clap::Parser;
use hearth_api::names::controllers::LOCK_MANAGER;
use hearth_lock_manager::{config, controller, crd_check};

fn main() -> anyhow::Result<()> {
    let config::Args { common, config } = config::Args::parse();
    hearth_runtime::block_on(hearth_runtime::run(LOCK_MANAGER, common, |rt| async move {
        crd_check::refuse_stale_crd(&rt).await?;
        controller::run(rt, config).await?;
        Ok(())
    }))
}
