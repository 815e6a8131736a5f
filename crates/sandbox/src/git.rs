//! How picogent runs git itself (checkpoints today): so that nothing the agent planted in
//! a repository or a folder runs with picogent's rights.
//!
//! - No system or global configuration, and every setting that makes git run a
//!   program is pinned on the command line, which outranks any repository config:
//!   hooks, `core.fsmonitor`, `core.sshCommand`, the pager and editor, external diff
//!   and textconv drivers. Filters cannot be named in advance, so picogent's own
//!   repositories carry an `info/attributes` (which outranks every `.gitattributes` in
//!   the tree) that unsets `filter`, `diff`, `merge` and friends for every path, and
//!   their `config` is restored to picogent's own before each use.
//! - Where the kernel allows it, git itself runs confined (Landlock and seccomp, no
//!   network): it can write only the work tree and its repository, like the agent's
//!   own commands, so even a setting missed above could not reach further.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::confine::{kernel_abi, Confinement};

/// Settings given on every git command line (they outrank repository config).
const PINNED: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=false",
    "core.pager=cat",
    "core.editor=false",
    "core.askPass=false",
    "core.attributesFile=/dev/null",
    "core.untrackedCache=false",
    "core.autocrlf=false",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "protocol.allow=never",
    "submodule.recurse=false",
    // Checkpoints share one object store per folder that only picogent's refs in
    // other repositories keep alive: nothing may prune it.
    "gc.auto=0",
    "maintenance.auto=false",
    // A repository nested in the tree (a gitlink) is not entered: its configuration
    // and attributes are the agent's and could name a filter.
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
];

/// The `info/attributes` of picogent's own repositories: no filter, diff or merge
/// driver for any path, whatever `.gitattributes` in the tree say.
const NEUTRAL_ATTRIBUTES: &str =
    "* !filter !diff !merge !ident !working-tree-encoding !text !eol\n";

/// The whole `config` of picogent's own repositories.
const OWN_CONFIG: &str =
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n";

/// A git command for `git_dir` with `work_tree`, hardened as described above, and run
/// through the sandbox helper when `confine` is given and the kernel can enforce it:
/// in the agent's namespaces when it has them, writing only `work_tree` and `git_dir`.
pub fn command(git_dir: &Path, work_tree: &Path, confine: Option<&Confinement>) -> Command {
    // The agent's own limits too (its configuration and `.env` hidden, its sessions
    // read-only), but for the folders this git works in.
    let apart = |p: &&PathBuf| !git_dir.starts_with(p) && !work_tree.starts_with(p);
    let mut cmd = helper_git(confine, &[work_tree, git_dir], |c, cmd| {
        cmd.arg("--rw")
            .arg(work_tree)
            .arg("--rw")
            .arg(git_dir)
            .arg("--tmp")
            .arg(git_dir);
        for h in c.hidden.iter().filter(apart) {
            cmd.arg("--hide").arg(h);
        }
        for r in c.read_only.iter().filter(apart) {
            cmd.arg("--ro").arg(r);
        }
    });
    cmd.arg(format!("--git-dir={}", git_dir.display()))
        .arg(format!("--work-tree={}", work_tree.display()))
        .current_dir(work_tree);
    cmd.env("GIT_AUTHOR_NAME", "picogent")
        .env("GIT_AUTHOR_EMAIL", "picogent@localhost")
        .env("GIT_COMMITTER_NAME", "picogent")
        .env("GIT_COMMITTER_EMAIL", "picogent@localhost");
    cmd
}

/// A git command that only reads (shared mode's `status`) in `cwd`: run through the
/// helper when there is a confinement, with nothing writable (but a private `/tmp`),
/// no network and picogent's own files hidden, in the agent's namespaces when it has
/// them, so a filter or driver missed by the overrides can do no more than the agent.
pub fn read_only_command(cwd: &Path, confine: Option<&Confinement>) -> Command {
    let mut cmd = helper_git(confine, &[cwd], |c, cmd| {
        cmd.arg("--no-writes");
        for d in &c.hidden {
            cmd.arg("--hide").arg(d);
        }
    });
    cmd.current_dir(cwd);
    cmd
}

/// git hardened, through the helper when there is a confinement the kernel can
/// enforce (namespaces when the agent has them, no network, what `layers` adds); the
/// folders under `/tmp` that `visible` lie in stay visible, read-only, in the private
/// `/tmp` (a repository there, an object store it borrows through `alternates`).
fn helper_git(
    confine: Option<&Confinement>,
    visible: &[&Path],
    layers: impl FnOnce(&Confinement, &mut Command),
) -> Command {
    let writable: Vec<PathBuf> = confine.and_then(|c| c.writable.clone()).unwrap_or_default();
    let mut cmd = match confine.filter(|_| kernel_abi() >= 3) {
        Some(c) => {
            let mut cmd = Command::new(c.helper.program());
            cmd.arg("sandbox-exec");
            if c.namespaces() {
                cmd.arg("--ns");
            }
            let mut shown: Vec<PathBuf> = visible
                .iter()
                .filter_map(|p| super::confine::tmp_top_folder(p))
                .collect();
            shown.sort();
            shown.dedup();
            for top in shown {
                cmd.arg("--show").arg(top);
            }
            layers(c, &mut cmd);
            if kernel_abi() >= 4 {
                cmd.arg("--deny-net");
            }
            cmd.arg("--").arg(super::git_program::program());
            cmd
        }
        None => Command::new(super::git_program::program()),
    };
    harden(&mut cmd, &writable);
    cmd
}

/// Makes a git command safe to run on a repository the agent may have written: the
/// settings that run programs pinned, no system or global configuration (`HOME` and
/// `XDG_CONFIG_HOME` are `/dev/null`, which no one can put a file under), `git` and
/// what it starts found only on a `PATH` without folders `writable` by the agent's
/// commands, no variable of picogent's environment pointing git elsewhere, names taken
/// literally.
pub fn harden(cmd: &mut Command, writable: &[PathBuf]) {
    // Only these of picogent's variables (no key or token, no `HOME`), and `TMPDIR`.
    cmd.env_clear();
    for var in super::programs::BASE_ENV.iter().chain(&["TMPDIR"]) {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.env("PATH", super::programs::trusted_path(writable))
        .env("HOME", "/dev/null")
        .env("XDG_CONFIG_HOME", "/dev/null")
        // git's words are read (a worktree `initializing`, errors in comments): untranslated.
        .env("LC_ALL", "C");
    for setting in PINNED {
        cmd.args(["-c", setting]);
    }
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        // File names are names: `:(exclude)x` or `*` in a folder are not patterns.
        .env("GIT_LITERAL_PATHSPECS", "1");
}

/// Makes git picogent's child for good: it and everything it starts die with
/// picogent, and a stop kills them all (see `git_group`), instead of finishing unseen
/// (or holding `index.lock` for ever).
pub fn die_with_picogent(cmd: &mut Command) {
    super::git_group::supervised(cmd);
}

pub use super::git_group::{stop, stop_pid};

/// Starts one of picogent's own git commands: refused when a setting it needs could
/// not be given to this git (see [`set_config`]), and made to die with picogent.
pub fn spawn(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    if let Some(why) = env_of(cmd, REFUSED) {
        return Err(std::io::Error::other(why));
    }
    die_with_picogent(cmd);
    cmd.spawn()
}

/// How much of git's standard error is kept (its message is cut shorter anyway).
const STDERR_KEPT: usize = 64 * 1024;

/// Runs git to the end, or kills it (and everything it started) after `limit`: a
/// repository the agent wrote can make git wait for good (an `include.path` naming a
/// FIFO), and a thread waiting on it must not wait with it. `input` goes to git's
/// standard input (else none), and at most `keep` bytes of its output are kept: the
/// rest is read and dropped, so git is not stopped by a full pipe (a diff of whatever
/// the agent wrote).
pub fn run_within(
    mut cmd: Command,
    limit: std::time::Duration,
    input: Option<Vec<u8>>,
    keep: usize,
) -> std::io::Result<std::process::Output> {
    use std::process::Stdio;
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let child = spawn(&mut cmd)?;
    let pid = i32::try_from(child.id()).unwrap_or(0);
    let (done, waited) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = collect(child, input, keep);
        let _ = done.send(());
        out
    });
    let timed_out = waited.recv_timeout(limit).is_err();
    if timed_out {
        // The supervisor kills git's group and reaps git (see `git_group`); the pipes
        // close with it, which ends the waiter's reads and writes.
        stop_pid(pid);
    }
    let out = waiter
        .join()
        .map_err(|_| std::io::Error::other("the thread waiting for git failed"))??;
    if timed_out {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "git did not finish within {} s and was stopped",
                limit.as_secs()
            ),
        ));
    }
    Ok(out)
}

/// Gives git its input, reads its output to the end (standard error on a thread of
/// its own, so neither pipe fills while the other is read) and waits for it.
fn collect(
    mut child: std::process::Child,
    input: Option<Vec<u8>>,
    keep: usize,
) -> std::io::Result<std::process::Output> {
    use std::io::Write;
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        // Small (a commit message): it fits the pipe before git reads it. A git that
        // never reads it fails this write once it is stopped.
        let _ = stdin.write_all(&input);
    }
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || kept(stderr, STDERR_KEPT));
    let stdout = kept(child.stdout.take(), keep);
    let status = child.wait()?;
    let stderr = errors.join().unwrap_or_default();
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// The first `keep` bytes a pipe gives, the rest read to its end and dropped.
fn kept(pipe: Option<impl std::io::Read>, keep: usize) -> Vec<u8> {
    use std::io::Read;
    let mut kept = Vec::new();
    if let Some(pipe) = pipe {
        let mut head = pipe.take(u64::try_from(keep).unwrap_or(u64::MAX));
        let _ = head.read_to_end(&mut kept);
        let _ = std::io::copy(&mut head.into_inner(), &mut std::io::sink());
    }
    kept
}

/// Adds settings through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`,
/// which outrank every configuration file like `-c` does, but take a key whole: `-c`
/// splits at the first `=`, so a driver the agent named `a=b` could not be emptied
/// that way. Neither way puts a value (a token) in git's arguments.
///
/// A git older than 2.31 reads no `GIT_CONFIG_COUNT`: the settings then go in
/// `GIT_CONFIG_PARAMETERS` (what git itself passes `-c` on in), which splits at the
/// first `=` too, so a key holding one cannot be given there. Such a command is
/// refused (see [`spawn`]) rather than run without the setting.
pub fn set_config(cmd: &mut Command, settings: &[(String, String)]) {
    if settings.is_empty() {
        return;
    }
    if !super::git_program::config_env() {
        set_config_parameters(cmd, settings);
        return;
    }
    let count = env_of(cmd, "GIT_CONFIG_COUNT")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    for (i, (k, v)) in settings.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{}", count + i), k)
            .env(format!("GIT_CONFIG_VALUE_{}", count + i), v);
    }
    cmd.env("GIT_CONFIG_COUNT", (count + settings.len()).to_string());
}

/// The value a variable is set to on `cmd`, if it is set there.
fn env_of(cmd: &Command, name: &str) -> Option<String> {
    cmd.get_envs()
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| Some(v?.to_str()?.to_string()))
}

/// The variable that marks a command picogent must not run (its value says why).
const REFUSED: &str = "PICOGENT_GIT_REFUSED";

/// git before 2.31: `'key=value'` items, each quoted as git's `sq_quote` does.
fn set_config_parameters(cmd: &mut Command, settings: &[(String, String)]) {
    let mut list = env_of(cmd, "GIT_CONFIG_PARAMETERS").unwrap_or_default();
    for (k, v) in settings {
        if k.contains('=') {
            let git = super::git_program::found()
                .map(|g| g.version.to_string())
                .unwrap_or_default();
            cmd.env(
                REFUSED,
                format!(
                    "the configuration defines {k:?}, whose name holds `=`; git {git} cannot \
                     be told to leave it unused (git 2.31 or newer can), so picogent does not run it"
                ),
            );
            continue;
        }
        let item = format!("{k}={v}");
        if !list.is_empty() {
            list.push(' ');
        }
        list.push('\'');
        for c in item.chars() {
            match c {
                '\'' => list.push_str("'\\''"),
                '!' => list.push_str("'\\!'"),
                c => list.push(c),
            }
        }
        list.push('\'');
    }
    cmd.env("GIT_CONFIG_PARAMETERS", list);
}

/// Puts picogent's own repository back as picogent made it: its `config`,
/// `info/attributes` and `info/exclude` (picogent's own files in the folder, given
/// relative to it), its `objects/info/alternates` (`objects`, another of picogent's
/// object stores, or none), and none of the files that would point git elsewhere.
/// Returns what had been changed (for a warning).
pub fn restore_own_repository(
    git_dir: &Path,
    excludes: &[String],
    objects: Option<&Path>,
) -> std::io::Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    let info = git_dir.join("info");
    std::fs::create_dir_all(&info)?;
    // picogent's own files inside the folder, anchored and with glob characters escaped.
    let exclude: String = excludes
        .iter()
        .map(|rel| {
            let mut line = String::from("/");
            for c in rel.chars() {
                if matches!(c, '*' | '?' | '[' | '\\' | '!' | '#' | ' ') {
                    line.push('\\');
                }
                line.push(c);
            }
            line.push('\n');
            line
        })
        .collect();
    let mut own = vec![
        (git_dir.join("config"), OWN_CONFIG.to_string()),
        (info.join("attributes"), NEUTRAL_ATTRIBUTES.to_string()),
        (info.join("exclude"), exclude),
    ];
    let alternates = git_dir.join("objects/info/alternates");
    match objects {
        Some(o) => {
            std::fs::create_dir_all(git_dir.join("objects/info"))?;
            own.push((alternates, format!("{}\n", o.display())));
        }
        None if std::fs::symlink_metadata(&alternates).is_ok() => {
            std::fs::remove_file(&alternates)?;
            changed.push(alternates);
        }
        None => {}
    }
    for (path, want) in own {
        let meta = std::fs::symlink_metadata(&path);
        let same = meta.as_ref().is_ok_and(|m| m.is_file())
            && std::fs::read(&path).is_ok_and(|b| b == want.as_bytes());
        if !same {
            if meta.is_ok() {
                changed.push(path.clone());
                let _ = std::fs::remove_file(&path);
            }
            std::fs::write(&path, want)?;
        }
    }
    for extra in ["commondir", "config.worktree"] {
        let p = git_dir.join(extra);
        if std::fs::symlink_metadata(&p).is_ok() {
            std::fs::remove_file(&p)?;
            changed.push(p);
        }
    }
    Ok(changed)
}

/// Folders below `top` that hold a `.git` of their own (relative, `/`-separated); the
/// walk does not enter them, nor follow links.
pub fn nested_repositories(top: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if !kind.is_dir() || e.file_name() == ".git" {
                continue;
            }
            let path = e.path();
            if std::fs::symlink_metadata(path.join(".git")).is_ok() {
                if let Ok(rel) = path.strip_prefix(top) {
                    found.push(rel.to_string_lossy().into_owned());
                }
            } else {
                stack.push(path);
            }
        }
    }
    found
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests may block")]
mod tests {
    use super::*;

    /// What a git reads from `GIT_CONFIG_PARAMETERS` as set for a git before 2.31
    /// (every git since reads the same format too).
    #[test]
    fn settings_for_an_old_git_are_read_back_whole_and_an_unsayable_key_refuses() {
        let settings = [
            (
                "http.https://h:9/.extraheader".to_string(),
                "Authorization: Basic a=b".to_string(),
            ),
            ("credential.helper".to_string(), String::new()),
            ("x.quote".to_string(), "it's here!".to_string()),
        ];
        let mut cmd = Command::new(super::super::git_program::program());
        cmd.args(["config", "--list"]).env("HOME", "/dev/null");
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        set_config_parameters(&mut cmd, &settings);
        assert!(env_of(&cmd, REFUSED).is_none());
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for line in [
            "http.https://h:9/.extraheader=Authorization: Basic a=b",
            "credential.helper=",
            "x.quote=it's here!",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        let mut cmd = Command::new("git");
        set_config_parameters(&mut cmd, &[("filter.a=b.clean".into(), String::new())]);
        let why = env_of(&cmd, REFUSED).expect("refused");
        assert!(why.contains("filter.a=b.clean"), "{why}");
        assert!(run_within(cmd, std::time::Duration::from_secs(5), None, usize::MAX).is_err());
    }
}
