//! Procedures in the user docs, run as written: the ```` ```sh ```` blocks of one section of
//! a Markdown file, each run by bash with the pinned `kubectl` and `helm` first on `PATH`
//! and the plane's admin kubeconfig, so that a test follows exactly the commands a person
//! copies.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::tools::Tools;

/// The `sh` code blocks under heading `heading` (the whole line, e.g. `## Upgrading`),
/// up to the next heading of the same or a higher level, in order, each without the
/// indentation of its fence (blocks inside list items are indented).
pub fn sh_blocks(markdown: &str, heading: &str) -> Result<Vec<String>> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut lines = markdown.lines().skip_while(|l| l.trim_end() != heading);
    if lines.next().is_none() {
        bail!("no heading {heading:?}");
    }
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for line in lines {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None if trimmed.starts_with('#') && !line.starts_with(' ') => {
                let depth = trimmed.chars().take_while(|c| *c == '#').count();
                if depth <= level {
                    break;
                }
            }
            None if trimmed == "```sh" => open = Some((indent, String::new())),
            None => {}
            Some((fence, body)) if trimmed == "```" && indent == *fence => {
                blocks.push(std::mem::take(body));
                open = None;
            }
            Some((fence, body)) => {
                // A heredoc's lines keep their own layout relative to the fence.
                body.push_str(line.get(*fence..).unwrap_or(trimmed));
                body.push('\n');
            }
        }
    }
    if open.is_some() {
        bail!("an unclosed code block under {heading:?}");
    }
    Ok(blocks)
}

/// Runs `script` with `bash -euo pipefail` in `dir`, with `KUBECONFIG=kubeconfig`, the
/// pinned tools first on `PATH` and `env` on top; fails with its output unless it exits 0.
/// Returns its stdout.
pub fn run_sh(script: &str, dir: &Path, kubeconfig: &Path, env: &[(&str, &str)]) -> Result<String> {
    let tools = Tools::locate()?;
    let path = format!(
        "{}:{}",
        tools.bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig);
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command
        .output()
        .with_context(|| format!("running {script}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{script}\nfailed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# T\n\n## A\n\n```sh\none\n```\n\n1. step\n\n   ```sh\n   two <<EOF\n   x\n   EOF\n   ```\n\n### A.1\n\n```sh\nthree\n```\n\n## B\n\n```sh\nfour\n```\n";

    #[test]
    fn blocks_of_a_section_and_its_subsections_in_order() {
        assert_eq!(
            sh_blocks(DOC, "## A").unwrap(),
            vec!["one\n", "two <<EOF\nx\nEOF\n", "three\n"]
        );
        assert_eq!(sh_blocks(DOC, "## B").unwrap(), vec!["four\n"]);
        assert!(sh_blocks(DOC, "## C").is_err());
    }
}
