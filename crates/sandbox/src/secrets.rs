//! Which variables no program picogent starts ever inherits: the one rule
//! (`is_secret`), fed by the configuration (`.env`'s names, variables it passes on).

use std::ffi::CStr;
use std::sync::OnceLock;

/// Variables that are secret whatever their name.
pub const SECRET_VARS: &[&str] = &[
    "AGENT_TOKEN",
    "PICOGENT_API_KEY",
    "PICOGENT_CHAT_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
    // A store URL may carry its password.
    "PICOGENT_STORE_URL",
];

/// The names `.env` defined: picogent's configuration, which commands never see.
static ENV_FILE_NAMES: OnceLock<Vec<String>> = OnceLock::new();

/// Variables the configuration hands to someone (`${VAR}` in `mcp_servers`).
static REFERENCED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Marks a variable the configuration passes on as secret: commands never inherit it.
pub fn mark_secret(name: &str) {
    let mut names = REFERENCED.lock().unwrap_or_else(|p| p.into_inner());
    if !names.iter().any(|n| n == name) {
        names.push(name.to_string());
    }
}

/// Whether a variable is kept from commands: `*_API_KEY`, `*_TOKEN`, anything named
/// like a secret or password, one of the tokens picogent reads, a variable the
/// configuration passes on (`${VAR}`), or anything picogent's `.env` defined.
pub fn is_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_API_KEY")
        || upper.ends_with("_TOKEN")
        || upper.contains("SECRET")
        || upper.contains("PASSWORD")
        || SECRET_VARS.contains(&name)
        || ENV_FILE_NAMES
            .get()
            .is_some_and(|names| names.iter().any(|n| n == name))
        || REFERENCED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|n| n == name)
}

/// Remembers the names `.env` defined (once, at start).
pub fn env_file_names(names: Vec<String>) {
    let _ = ENV_FILE_NAMES.set(names);
}

extern "C" {
    static mut environ: *mut *mut libc::c_char;
}

/// Wipes secret values from the environment block `/proc/self/environ` shows, keeping
/// them readable through `std::env`. Call first thing in `main`, single-threaded.
pub fn hide_from_proc() {
    // SAFETY: single-threaded at start; `environ` is the C library's NULL-terminated
    // array, and every entry still points into the block the kernel set up, which is
    // writable memory of this process that nothing frees.
    unsafe {
        let mut wipe: Vec<(*mut libc::c_char, usize)> = Vec::new();
        let mut copies: Vec<(String, String)> = Vec::new();
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let entry = CStr::from_ptr(*p).to_bytes();
            if let Some(eq) = entry.iter().position(|b| *b == b'=') {
                let (name, value) = (&entry[..eq], &entry[eq + 1..]);
                if let (Ok(n), Ok(v)) = (std::str::from_utf8(name), std::str::from_utf8(value)) {
                    if is_secret(n) && !v.is_empty() {
                        copies.push((n.to_string(), v.to_string()));
                        wipe.push(((*p).add(eq + 1), value.len()));
                    }
                }
            }
            p = p.add(1);
        }
        for (n, v) in copies {
            // setenv copies the pair to the heap and repoints the entry.
            std::env::set_var(n, v);
        }
        for (ptr, len) in wipe {
            std::ptr::write_bytes(ptr, 0, len);
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}
