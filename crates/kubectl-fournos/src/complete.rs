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
        "#!/bin/sh\n# Completes `kubectl fournos …` for kubectl (see `kubectl fournos completion --help`).\nexec {PLUGIN} {REQUEST} \"$@\"\n"
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

/// The plugin's executable, as kubectl finds it on $PATH.
pub const PLUGIN: &str = "kubectl-fournos";

/// Where `completion install` writes the shim: the first directory of `path` (the value of
/// $PATH) that holds an executable `kubectl-fournos`, as it is written there: kubectl runs
/// the plugin from that directory and finds the shim next to it. Under krew that is
/// `~/.krew/bin`, whose `kubectl-fournos` is a symlink into krew's store, off $PATH
/// (krew#812), which is where `current_exe` (the resolved link) points. `exe` (the running
/// binary) only when no directory of `path` has the plugin.
pub fn plugin_dir(path: Option<&std::ffi::OsStr>, exe: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let on_path = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .find(|dir| {
            // An empty entry means the working directory: not where a plugin is installed.
            !dir.as_os_str().is_empty()
                && std::fs::metadata(dir.join(PLUGIN))
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    on_path.or_else(|| exe?.parent().map(Path::to_path_buf))
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
pub fn complete(mut root: Command, words: &[String]) -> Answer {
    root.build();
    let (current, typed) = words
        .split_last()
        .map_or(("", &[][..]), |(current, typed)| (current.as_str(), typed));
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
    let lines: String = candidates.iter().map(|c| format!("{c}\n")).collect();
    format!("{lines}:{directive}\n")
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
    match help.map(|h| h.to_string()).filter(|h| !h.is_empty()) {
        Some(help) => format!("{value}\t{}", help.lines().next().unwrap_or_default()),
        None => value.to_owned(),
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

    /// A directory of its own under the system's temporary one, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("kubectl-fournos-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        /// `rel`, created as an executable file (or a symlink to `target`).
        fn plugin(&self, rel: &str, target: Option<&Path>) -> PathBuf {
            use std::os::unix::fs::PermissionsExt as _;
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            match target {
                Some(target) => std::os::unix::fs::symlink(target, &path).unwrap(),
                None => {
                    std::fs::write(&path, "#!/bin/sh\n").unwrap();
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                        .unwrap();
                }
            }
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_shim_goes_where_path_finds_the_plugin_not_where_krews_link_points() {
        let t = Scratch::new("krew");
        // krew: the binary in its store, a symlink to it in ~/.krew/bin (on $PATH).
        let store = t.plugin("store/fournos/v1/kubectl-fournos", None);
        let bin = t.0.join("krew/bin");
        t.plugin("krew/bin/kubectl-fournos", Some(&store));
        let empty = t.0.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let path =
            std::env::join_paths(["", empty.to_str().unwrap(), bin.to_str().unwrap()]).unwrap();
        // The running binary is the resolved link, as current_exe says on Linux.
        assert_eq!(plugin_dir(Some(&path), Some(&store)), Some(bin.clone()));

        // A file of the name that is not executable is not what kubectl runs.
        let decoy = t.0.join("decoy");
        std::fs::create_dir_all(&decoy).unwrap();
        std::fs::write(decoy.join(PLUGIN), "").unwrap();
        let path = std::env::join_paths([decoy.as_path(), bin.as_path()]).unwrap();
        assert_eq!(plugin_dir(Some(&path), Some(&store)), Some(bin));

        // Not on $PATH at all (run by its path): next to the binary.
        let path = std::env::join_paths([empty.as_path()]).unwrap();
        assert_eq!(
            plugin_dir(Some(&path), Some(&store)),
            store.parent().map(Path::to_path_buf)
        );
        assert_eq!(plugin_dir(None, None), None);
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
