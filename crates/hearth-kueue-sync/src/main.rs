use clap::Parser;
use hearth_api::names::controllers::KUEUE_SYNC;
use hearth_kueue_sync::config::Args;

fn main() -> anyhow::Result<()> {
    let Args { common, config } = Args::parse();
    hearth_runtime::block_on(hearth_runtime::run(KUEUE_SYNC, common, |rt| async move {
        hearth_kueue_sync::controller::run(rt, config).await?;
        Ok(())
    }))
}
