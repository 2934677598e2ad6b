use clap::Parser;
use hearth_api::names::controllers::DISCOVERY;
use hearth_discovery::config::Args;

fn main() -> anyhow::Result<()> {
    let Args { common, config } = Args::parse();
    hearth_runtime::block_on(hearth_runtime::run(DISCOVERY, common, |rt| async move {
        hearth_discovery::controller::run(rt, config).await;
        Ok(())
    }))
}
