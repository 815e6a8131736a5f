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
            if !dir_given {
                follow_header(config, &dir.join(format!("{id}.jsonl")));
            }
            let dir = config::absolute(&cwd, &dir);
            if dir != own && std::fs::canonicalize(&own).ok().as_ref() != Some(&dir) {
                session_folder_allowed(config, &dir)?;
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
            session_folder_allowed(config, &dir)?;
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot make {}", dir.display()))?;
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
    let allowed = config.policy.allowed_paths.is_empty()
        || config
            .policy
            .allowed_paths
            .iter()
            .any(|a| real.starts_with(std::fs::canonicalize(a).unwrap_or_else(|_| a.clone())));
    if !allowed {
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

/// The sessions folder is made read-only to the agent: one that holds the working
/// folder or an allowed path would take the agent's writes away.
fn session_folder_allowed(config: &Config, dir: &Path) -> anyhow::Result<()> {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let folder = real(dir);
    let holds = std::iter::once(&config.work_dir)
        .chain(&config.policy.allowed_paths)
        .any(|p| real(p).starts_with(&folder));
    if holds {
        anyhow::bail!(
            "a session in {} would make that folder, which holds the working folder, read-only to the agent: keep session files outside it",
            dir.display()
        );
    }
    Ok(())
}
