//! Completion of `kubectl fournos …` through kubectl. kubectl completes a plugin's
//! arguments by running `kubectl_complete-fournos <words>` from $PATH: the words after
//! `fournos`, the last one being the word to complete (empty when it is a new word). It
//! prints Cobra's answer: one candidate a line (`value<TAB>description`), then
//! `:<directive>`. [`complete`] answers from the clap definition of the command line, so
//! the completions never drift from the flags; [`shim`] is the executable kubectl runs.

use std::path::{Path, PathBuf};

use clap::{Arg, Command};

/// The executable kubectl looks for on $PATH to complete `kubectl fournos …`.
pub const EXECUTABLE: &str = "kubectl_complete-fournos";

/// The hidden first argument under which the plugin answers a completion request.
pub const REQUEST: &str = "__complete";

/// Cobra's ShellCompDirectiveDefault: the shell may also offer file names.
const FILES: u32 = 0;
/// Cobra's ShellCompDirectiveNoFileComp.
const NO_FILES: u32 = 4;

/// The shell script installed as [`EXECUTABLE`]: it finds the plugin on $PATH at each
/// completion, so it survives the plugin being upgraded or moved.
pub fn shim() -> String {
    format!(
        "#!/bin/sh\n# Completes `kubectl fournos …` for kubectl (see `kubectl fournos completion --help`).\nexec kubectl-fournos {REQUEST} \"$@\"\n"
    )
}

/// Writes [`shim`] as `dir/kubectl_complete-fournos`, executable; returns its path. An
/// existing file of that name is replaced only if it is a shim.
pub fn install(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(EXECUTABLE);
    if let Ok(existing) = std::fs::read_to_string(&path)
        && !existing.contains(&format!("kubectl-fournos {REQUEST}"))
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not the plugin's shim: move it away first",
                path.display()
            ),
        ));
    }
    std::fs::write(&path, shim())?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// What [`complete`] answers.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Answer {
    pub candidates: Vec<String>,
    pub directive: u32,
    /// The word is a FournosCluster's name: the caller lists the clusters (the one read
    /// completion makes) and adds those that start with the word.
    pub clusters: Option<ClusterQuery>,
}

/// Where to list FournosClusters from: the global flags typed so far.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ClusterQuery {
    pub prefix: String,
    /// `--namespace`, `--kubeconfig`, `--context` as typed, for the same connection as
    /// the command would make.
    pub flags: Vec<String>,
}

/// The flags that choose the cluster and namespace the command reads.
const CONNECTION_FLAGS: [&str; 3] = ["namespace", "kubeconfig", "context"];

/// Cobra's answer for `words` (the last one is being typed).
pub fn complete(root: Command, words: &[String]) -> Answer {
    let mut root = root;
    root.build();
    let (current, typed) = match words.split_last() {
        Some((current, typed)) => (current.as_str(), typed),
        None => ("", &[][..]),
    };
    let mut command = &root;
    let mut awaiting_value: Option<&Arg> = None;
    let mut positionals = 0;
    let mut connection = Vec::new();
    let mut remember = |arg: &Arg, value: &str| {
        if let Some(long) = arg.get_long().filter(|l| CONNECTION_FLAGS.contains(l)) {
            connection.push(format!("--{long}={value}"));
        }
    };
    for word in typed {
        if let Some(arg) = awaiting_value.take() {
            remember(arg, word);
            continue;
        }
        if let Some(flag) = word.strip_prefix("--") {
            match flag.split_once('=') {
                Some((flag, value)) => {
                    if let Some(arg) = find_long(command, flag) {
                        remember(arg, value);
                    }
                }
                None => awaiting_value = find_long(command, flag).filter(|a| takes_value(a)),
            }
        } else if let Some(short) = word.strip_prefix('-').filter(|s| s.len() == 1) {
            awaiting_value = command
                .get_arguments()
                .find(|a| a.get_short().is_some_and(|c| c.to_string() == short))
                .filter(|a| takes_value(a));
        } else if let Some(sub) = command.find_subcommand(word) {
            command = sub;
            positionals = 0;
        } else {
            positionals += 1;
        }
    }
    let mut clusters = None;
    let (candidates, directive) = if let Some(arg) = awaiting_value {
        values(arg, "")
    } else if let Some((flag, _)) = current.strip_prefix("--").and_then(|f| f.split_once('=')) {
        match find_long(command, flag) {
            Some(arg) => values(arg, &format!("--{flag}=")),
            None => (Vec::new(), NO_FILES),
        }
    } else if current.starts_with('-') {
        let flags = command
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| Some(described(&format!("--{}", a.get_long()?), a.get_help())))
            .collect();
        (flags, NO_FILES)
    } else {
        let mut candidates: Vec<String> = command
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .map(|s| described(s.get_name(), s.get_about()))
            .collect();
        if let Some(arg) = command.get_positionals().nth(positionals) {
            if arg.get_id() == "cluster" {
                clusters = Some(ClusterQuery {
                    prefix: current.to_owned(),
                    flags: connection,
                });
            }
            candidates.extend(values(arg, "").0);
        }
        (candidates, NO_FILES)
    };
    let candidates = candidates
        .into_iter()
        .filter(|c| c.starts_with(current))
        .collect();
    Answer {
        candidates,
        directive,
        clusters,
    }
}

/// [`complete`]'s answer as kubectl reads it.
pub fn render(candidates: &[String], directive: u32) -> String {
    let mut out = String::new();
    for candidate in candidates {
        out.push_str(candidate);
        out.push('\n');
    }
    out.push_str(&format!(":{directive}\n"));
    out
}

fn find_long<'c>(command: &'c Command, long: &str) -> Option<&'c Arg> {
    command.get_arguments().find(|a| a.get_long() == Some(long))
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

/// The values `arg` takes, each prefixed; file names when it is a path.
fn values(arg: &Arg, prefix: &str) -> (Vec<String>, u32) {
    if matches!(
        arg.get_value_hint(),
        clap::ValueHint::FilePath | clap::ValueHint::DirPath | clap::ValueHint::AnyPath
    ) {
        return (Vec::new(), FILES);
    }
    let values = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| described(&format!("{prefix}{}", v.get_name()), v.get_help()))
        .collect();
    (values, NO_FILES)
}

/// `value<TAB>first line of its help`, as Cobra shows descriptions.
fn described(value: &str, help: Option<&clap::builder::StyledStr>) -> String {
    match help.map(|h| h.to_string()) {
        Some(help) if !help.is_empty() => {
            let first = help.lines().next().unwrap_or_default();
            format!("{value}\t{first}")
        }
        _ => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;
    use crate::cli::Cli;

    fn answer(words: &[&str]) -> Answer {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        complete(Cli::command(), &words)
    }

    fn names(words: &[&str]) -> (Vec<String>, u32) {
        let answer = answer(words);
        let names = answer
            .candidates
            .iter()
            .map(|c| c.split('\t').next().unwrap_or_default().to_owned())
            .collect();
        (names, answer.directive)
    }

    #[test]
    fn verbs_complete_first() {
        let (verbs, directive) = names(&[""]);
        for verb in [
            "lock",
            "unlock",
            "status",
            "why",
            "wait",
            "doctor",
            "completion",
        ] {
            assert!(verbs.contains(&verb.to_owned()), "{verbs:?}");
        }
        assert!(!verbs.contains(&"help".to_owned()));
        assert_eq!(directive, NO_FILES);
        assert_eq!(names(&["un"]).0, ["unlock", "uncordon"]);
        assert_eq!(names(&["unl"]).0, ["unlock"]);
    }

    #[test]
    fn flags_of_the_verb_and_the_global_ones() {
        let (flags, _) = names(&["lock", "mycluster", "--"]);
        for flag in ["--ttl", "--owner", "--force", "--namespace", "--kubeconfig"] {
            assert!(flags.contains(&flag.to_owned()), "{flags:?}");
        }
        assert_eq!(names(&["lock", "c", "--t"]).0, ["--ttl"]);
        assert_eq!(names(&["wait", "c", "--ti"]).0, ["--timeout"]);
    }

    #[test]
    fn values_of_flags_and_positionals() {
        assert_eq!(names(&["status", "-o", ""]).0, ["table", "json", "yaml"]);
        assert_eq!(names(&["status", "--output", "j"]).0, ["json"]);
        assert_eq!(names(&["status", "--output=y"]).0, ["--output=yaml"]);
        assert_eq!(names(&["completion", "i"]).0, ["install"]);
        assert_eq!(
            names(&["doctor", "--sentinel", ""]).0,
            ["fournosjob", "workload"]
        );
        // A flag's value is not taken for a verb: `-n lock` names a namespace.
        assert_eq!(names(&["-n", "lock", "st"]).0, ["status"]);
        // The kubeconfig is a file: the shell completes it.
        assert_eq!(names(&["status", "--kubeconfig", ""]).1, FILES);
    }

    #[test]
    fn a_cluster_is_asked_for_with_the_connection_typed_so_far() {
        for verb in [
            "lock", "unlock", "cordon", "uncordon", "status", "why", "wait",
        ] {
            let query = answer(&[verb, "gp"]).clusters.expect(verb);
            assert_eq!(query.prefix, "gp");
        }
        let query = answer(&[
            "-n",
            "fleet",
            "why",
            "--kubeconfig",
            "/k",
            "--context=c",
            "-o",
            "json",
            "",
        ])
        .clusters
        .unwrap();
        assert_eq!(
            query.flags,
            ["--namespace=fleet", "--kubeconfig=/k", "--context=c"]
        );
        // Not where a cluster goes: the verb, a flag's value, a second positional.
        assert_eq!(answer(&[""]).clusters, None);
        assert_eq!(answer(&["lock", "--ttl", ""]).clusters, None);
        assert_eq!(answer(&["lock", "a", ""]).clusters, None);
        assert_eq!(answer(&["completion", ""]).clusters, None);
    }

    #[test]
    fn the_answer_is_cobras() {
        let out = render(&["lock\tLock a cluster".into()], NO_FILES);
        assert_eq!(out, "lock\tLock a cluster\n:4\n");
        assert!(shim().starts_with("#!/bin/sh\n"));
        assert!(shim().contains("exec kubectl-fournos __complete \"$@\""));
    }
}
