//! picogent's wire and record types, as serde types with no runtime: what a run tells
//! the front doors (`agent`), the chat WebSocket's frames both ways (`chat`), the
//! provider-neutral messages that sessions store as pi's (`message`), the records of a
//! session file and the views of it clients get (`session`), and what trackers send
//! and picogent reports back (`tracker`). Each is parsed and built here, in one place; picogent's front doors and
//! stores use them as they are.
#![forbid(unsafe_code)]

pub mod agent;
pub mod chat;
pub mod message;
pub mod session;
pub mod text;
pub mod tracker;
