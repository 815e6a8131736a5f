//! What the helper says when a step of a command's confinement cannot be set up: the
//! step, and the system's answer when there was one (its kind for callers that act on
//! it). Printed as `step: answer`, as before it was a type.

use std::fmt;

#[derive(Debug)]
pub struct SetupError {
    what: String,
    os: Option<std::io::Error>,
}

impl SetupError {
    /// The step `what` failed with the system's last error.
    pub fn os(what: impl fmt::Display) -> SetupError {
        SetupError {
            what: what.to_string(),
            os: Some(std::io::Error::last_os_error()),
        }
    }

    /// The system's answer's kind, when the step failed in a system call.
    pub fn kind(&self) -> Option<std::io::ErrorKind> {
        self.os.as_ref().map(std::io::Error::kind)
    }

    /// The system's error number, when the step failed in a system call.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.os.as_ref().and_then(std::io::Error::raw_os_error)
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.os {
            Some(e) => write!(f, "{}: {e}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.os.as_ref().map(|e| e as _)
    }
}

/// A step refused for a reason of picogent's own (no system call failed).
impl From<String> for SetupError {
    fn from(what: String) -> SetupError {
        SetupError { what, os: None }
    }
}

impl From<&str> for SetupError {
    fn from(what: &str) -> SetupError {
        SetupError::from(what.to_string())
    }
}
