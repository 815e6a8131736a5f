//! `picogent run --session ARG`: an id, a prefix or a path resolved to a session, the
//! folder a continued session works in (its header's, as pi does), and `--no-session`'s
//! scratch folder.

use std::path::{Path, PathBuf};

use anyhow::Context;
use picogent::config::{self, Config};

/// A `--no-session` run's folder, removed however the run ends.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = picogent::util::remove_tree(&self.0) {
            say!("picogent: cannot remove {}: {e}", self.0.display());
        }
    }
}

/// `--session ARG` resolved to an id, pointing the config at the folder of a session
/// found outside picogent's own (a pi session file).
/// A continued session runs in the folder its header names, as pi does, unless
/// `--dir` says otherwise (`dir_given`).
pub(crate) fn pick_session(
    config: &mut Config,
    arg: &str,
    dir_given: bool,
) -> anyhow::Result<String> {
    use picogent::session::find;
    let own = config.own_sessions_dir();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let pi = home.as_deref().map(find::pi_sessions_dir);
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    match find::resolve(arg, &own, pi.as_deref())? {
        find::Found::Existing { dir, id } => {
            // A header in a folder the agent writes could name any folder: not followed.
            if !dir_given && !holds_work(config, &config::absolute(&cwd, &dir)) {
                follow_header(config, &dir.join(format!("{id}.jsonl")));
            }
            let dir = config::absolute(&cwd, &dir);
            if dir != own && std::fs::canonicalize(&own).ok().as_ref() != Some(&dir) {
                protect_alone(config, &dir, &id)?;
                config.session_dir = Some(dir);
            } else if config.own_sessions_dir() != own {
                // The working folder moved, and the sessions folder with it (no HOME).
                config.session_dir = Some(own);
            }
            Ok(id)
        }
        find::Found::New(id) => {
            say!("new session {id}");
            Ok(id)
        }
        find::Found::NewAt { dir, id } => {
            let dir = config::absolute(&cwd, &dir);
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot make {}", dir.display()))?;
            protect_alone(config, &dir, &id)?;
            say!("new session {id} in {}", dir.display());
            config.session_dir = Some(dir);
            Ok(id)
        }
    }
}

/// A continued session works in the folder its header names (as pi does), when the
/// configuration allows that folder; otherwise where it was asked to, with a warning.
fn follow_header(config: &mut Config, file: &Path) {
    let Some(cwd) = picogent::session::find::header(file)
        .and_then(|h| h["cwd"].as_str().map(PathBuf::from))
        .filter(|c| c.is_dir())
    else {
        return;
    };
    let real = std::fs::canonicalize(&cwd).unwrap_or_else(|_| cwd.clone());
    if !config.within_allowed_paths(&real) {
        say!(
            "picogent: the session started in {}, outside allowed_paths; working in {}",
            cwd.display(),
            config.work_dir.display()
        );
    } else if real != config.work_dir {
        say!("working in {} (where the session started)", cwd.display());
        config.work_dir = cwd;
    }
}

/// The sessions folder is made read-only to the agent; one that holds the working
/// folder or an allowed path (a session file inside or above it, as pi allows) would
/// take the agent's writes away, so there the session file alone is protected from
/// the agent, as the configuration file is (made first, empty, when it is new, so the
/// sandbox has it to protect from the start).
fn protect_alone(config: &mut Config, dir: &Path, id: &str) -> anyhow::Result<()> {
    if holds_work(config, dir) {
        let file = dir.join(format!("{id}.jsonl"));
        if std::fs::symlink_metadata(&file).is_err() {
            picogent::session::SessionStore::new(dir).make(id, &config.work_dir)?;
        }
        use std::os::unix::fs::MetadataExt;
        // A link, or a second name the agent could still write through, is not the
        // session file picogent keeps from it.
        let plain = std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file() && m.nlink() == 1);
        if !plain {
            anyhow::bail!(
                "{} is not a plain file of its own (a link, or a file with another name): not used as a session inside the working folder",
                file.display()
            );
        }
        config.session_file = Some(file);
    }
    Ok(())
}

/// Whether `dir` holds the working folder or an allowed path (the agent writes there).
fn holds_work(config: &Config, dir: &Path) -> bool {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let folder = real(dir);
    std::iter::once(&config.work_dir)
        .chain(&config.policy.allowed_paths)
        .any(|p| real(p).starts_with(&folder))
}

/// Sessions a `--resume` picker offers, at most.
const PICKED_FROM: usize = 20;

/// `-r` / `--resume`: on a terminal, a list of this folder's recent sessions to pick
/// from (Enter takes the newest); otherwise the newest, as `--continue`.
pub(crate) fn resume(config: &Config) -> anyhow::Result<String> {
    use std::io::{BufRead, IsTerminal, Write};
    let recent = picogent::session::find::recent_in(
        &config.own_sessions_dir(),
        &config.work_dir,
        PICKED_FROM,
    );
    let Some(newest) = recent.first() else {
        anyhow::bail!(
            "no session to resume: none was started in {}",
            config.work_dir.display()
        );
    };
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) || recent.len() == 1 {
        say!("resuming session {}", newest.1);
        return Ok(newest.1.clone());
    }
    let mut err = std::io::stderr();
    let _ = writeln!(err, "Sessions started in {}:", config.work_dir.display());
    for (i, (when, _, path)) in recent.iter().enumerate() {
        let when = chrono::DateTime::<chrono::Local>::from(*when).format("%Y-%m-%d %H:%M");
        let s = picogent::session::summary::summary(path, Default::default()).unwrap_or_default();
        let title = s.name.or(s.prompt).unwrap_or_default();
        let _ = writeln!(
            err,
            "{:>3}  {when}  {}",
            i + 1,
            picogent::util::one_line(&title, 70)
        );
    }
    loop {
        let _ = write!(err, "resume which? [1-{}, Enter: 1] ", recent.len());
        let _ = err.flush();
        let mut line = String::new();
        if std::io::stdin().lock().read_line(&mut line)? == 0 {
            anyhow::bail!("no session picked");
        }
        let pick = line.trim();
        let n = if pick.is_empty() {
            Some(1)
        } else {
            pick.parse::<usize>().ok()
        };
        if let Some((_, id, _)) = n.and_then(|n| n.checked_sub(1)).and_then(|i| recent.get(i)) {
            return Ok(id.clone());
        }
    }
}

/// `--fork ID`: a copy of that session (found as `--session` finds it) under a new id
/// in picogent's sessions folder, naming the original as its `parentSession` (as pi's
/// forks do); the run continues the copy and the original stays as it was.
pub(crate) fn fork(config: &mut Config, arg: &str, dir_given: bool) -> anyhow::Result<String> {
    use std::io::Write;
    let id = pick_session(config, arg, dir_given)?;
    let from = config.sessions_dir().join(format!("{id}.jsonl"));
    let text = std::fs::read_to_string(&from)
        .with_context(|| format!("no session {arg:?} to fork ({})", from.display()))?;
    // Whole lines only: a run writing the original may be mid-line.
    let text = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let mut header: serde_json::Value = serde_json::from_str(first)
        .ok()
        .filter(|h: &serde_json::Value| h["type"] == "session")
        .with_context(|| format!("{} has no session header to fork", from.display()))?;
    let new_id = picogent::util::new_session_id();
    header["id"] = new_id.clone().into();
    header["timestamp"] = chrono::Utc::now()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        .into();
    header["parentSession"] = from.display().to_string().into();
    config.session_dir = None;
    let dir = config.own_sessions_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let to = dir.join(format!("{new_id}.jsonl"));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&to)
        .with_context(|| format!("cannot make {}", to.display()))?;
    out.write_all(format!("{header}\n{rest}").as_bytes())
        .and_then(|()| out.sync_all())
        .with_context(|| format!("cannot write {}", to.display()))?;
    say!("forked session {id} as {new_id}");
    Ok(new_id)
}
