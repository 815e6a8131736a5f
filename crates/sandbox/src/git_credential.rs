//! How a secret (GitHub's token) reaches one of picogent's git commands: through a
//! descriptor, never in an environment or on a command line, where another task's
//! command could read it (`/proc/<pid>/environ` of a git is readable by any process of
//! the same user that may trace it, `cmdline` by everyone).
//!
//! git gets a credential helper, a shell function in its configuration that answers
//! git's `get` with a username and password read from a descriptor git inherited: one
//! end of a socket pair whose other end picogent wrote the credentials into and closed.
//! A socket, not a pipe or a file: a pipe or a memfd can be opened again through
//! `/proc/<pid>/fd/N` by the same readers as `environ` (and drained), a socket cannot.
//! The helper uses only shell builtins (`read`, `printf`), so the secret is in no
//! program's arguments either.
//!
//! The descriptor reaches only this git and what git starts: between fork and exec,
//! in the child alone, the socket is copied to a number picogent keeps for this (the
//! copy is not close-on-exec). That number is below 10, since the shell git runs the
//! helper with (dash) takes one digit in a redirection, and picogent holds it open on
//! `/dev/null` for good, so it never names another of picogent's files (the pipe
//! `Command` reports a failed exec on, say) that the copy would replace in the child.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::OnceLock;

/// Why a credential cannot be handed to git.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error(
        "the credential holds a line break or a NUL, which git's credential protocol cannot carry"
    )]
    Unsayable,
    #[error("cannot make the socket that hands git its credential: {0}")]
    Socket(#[from] io::Error),
    #[error("no descriptor below 10 was free to keep for the socket that hands git its credential (see `git_credential::reserve`)")]
    NoSlot,
}

/// The descriptor number the helper reads (see the module docs), if one could be kept.
static SLOT: OnceLock<Option<OwnedFd>> = OnceLock::new();

/// Keeps the helper's descriptor number: call at start, before anything else opens
/// files (else the first credential tries, when a low number may be taken).
pub fn reserve() {
    SLOT.get_or_init(open_slot);
}

/// The lowest free descriptor from 3 on, open on `/dev/null`, when it is below 10.
fn open_slot() -> Option<OwnedFd> {
    let null = std::fs::File::open("/dev/null").ok()?;
    // SAFETY: a plain system call on an open descriptor; the copy it returns is new.
    let fd = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    (fd.as_raw_fd() <= 9).then_some(fd)
}

/// Makes `cmd` able to answer `answers` credential requests with `username` and
/// `password`: returns the helper (the value of a `credential.<url>.helper` setting,
/// which the caller scopes to the one URL it is for), and keeps the descriptor the
/// helper reads on `cmd` until `cmd` is dropped.
///
/// git asks once per connection to a remote that refused it (401); a push to a remote
/// with several URLs asks once for each, hence one answer per URL.
pub fn hand_to(
    cmd: &mut Command,
    username: &str,
    password: &str,
    answers: usize,
) -> Result<String, CredentialError> {
    let unsayable = |s: &str| s.contains(['\n', '\r', '\0']);
    if unsayable(username) || unsayable(password) {
        return Err(CredentialError::Unsayable);
    }
    let slot = SLOT
        .get_or_init(open_slot)
        .as_ref()
        .map(AsRawFd::as_raw_fd)
        .ok_or(CredentialError::NoSlot)?;
    // Both ends close-on-exec: no other program picogent starts meanwhile gets one.
    let (mut ours, theirs) = UnixStream::pair()?;
    let theirs = OwnedFd::from(theirs);
    for _ in 0..answers {
        // A few hundred bytes: within the socket's buffer, so this never blocks.
        ours.write_all(format!("{username}\n{password}\n").as_bytes())?;
    }
    drop(ours);
    // SAFETY: runs in the forked child before exec and makes one async-signal-safe
    // call (dup2) on a descriptor the closure keeps open (`theirs` lives in it until
    // `cmd` is dropped) and the slot, which stays open for good. `dup2` replaces the
    // child's `/dev/null` there, and its copy is not close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(theirs.as_raw_fd(), slot) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // `read` takes one line at a time, byte by byte on a socket: each answer leaves the
    // next for the next request. Any other request (`store`, `erase`) is ignored.
    Ok(format!(
        "!f() {{ test \"$1\" = get || return 0; read -r u <&{slot} && read -r p <&{slot} && \
         printf 'username=%s\\npassword=%s\\n' \"$u\" \"$p\"; }}; f"
    ))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests may block")]
mod tests {
    use super::*;

    /// The helper as git runs it (`sh -c '<helper> get'`): each request gets one
    /// answer, a third gets none, and the helper itself names no secret.
    #[test]
    fn each_request_reads_one_answer_and_the_helper_shows_no_secret() {
        // The harness's other tests hold many descriptors at once, so no number below
        // 10 may be free here: the check runs in a fresh copy of this binary, which
        // keeps one first, as picogent does at start.
        const NAME: &str =
            "git_credential::tests::each_request_reads_one_answer_and_the_helper_shows_no_secret";
        if std::env::var_os("PICOGENT_CREDENTIAL_TEST_CHILD").is_none() {
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--test-threads=1"])
                .env("PICOGENT_CREDENTIAL_TEST_CHILD", "1")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && said.contains("1 passed"), "{said}");
            return;
        }
        reserve();
        let mut sh = Command::new("/bin/sh");
        let helper = hand_to(&mut sh, "x-access-token", "s3cret", 2).unwrap();
        assert!(!helper.contains("s3cret"), "{helper}");
        let script = helper.strip_prefix('!').unwrap();
        let out = sh
            .arg("-c")
            .arg(format!(
                "{script} get; {script} store; {script} get; echo end; {script} get"
            ))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text,
            "username=x-access-token\npassword=s3cret\n\
             username=x-access-token\npassword=s3cret\nend\n"
        );
        let mut refused = Command::new("true");
        assert!(matches!(
            hand_to(&mut refused, "u", "a\nb", 1),
            Err(CredentialError::Unsayable)
        ));
    }
}
