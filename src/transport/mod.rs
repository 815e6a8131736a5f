//! The front doors' network sides: the HTTP callback server (`http`) and the outbound
//! WebSocket client (`ws`) of agent mode, and the chat server (`chat`) of chat mode.

pub mod chat;
mod chat_runs;
pub mod http;
pub mod ws;
