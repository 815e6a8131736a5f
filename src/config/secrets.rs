//! Secrets out of picogent's process image.
//!
//! Keys and tokens arrive in the environment. A process's `/proc/<pid>/environ` shows
//! the environment block it was started with, whatever it later unsets, so a command
//! that can read it (Landlock alone does not hide it) would find them there. At start,
//! before any thread exists, picogent copies each secret into its own (heap) environment
//! and wipes the value in the original block, and makes itself non-dumpable so that
//! `/proc/<pid>/mem` and friends need privileges no command has. Commands never inherit
//! the secret variables, nor anything picogent's `.env` defined (`is_secret` is the one
//! rule).

use picogent_sandbox::secrets::env_file_names;
pub use picogent_sandbox::secrets::is_secret;
pub(crate) use picogent_sandbox::secrets::mark_secret;

/// Loads `path` (a `.env` file) into the environment, variables already set winning,
/// and remembers every name it defines so that no command inherits it. `Ok(false)`
/// when there is no such file. Call at start, single-threaded.
pub fn load_env_file(path: &std::path::Path) -> Result<bool, dotenvy::Error> {
    let iter = match dotenvy::from_path_iter(path) {
        Ok(it) => it,
        Err(e) if e.not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for item in iter {
        let (k, v) = item?;
        if std::env::var_os(&k).is_none() {
            std::env::set_var(&k, v);
        }
        names.push(k);
    }
    env_file_names(names);
    Ok(true)
}

pub use picogent_sandbox::secrets::hide_from_proc;
