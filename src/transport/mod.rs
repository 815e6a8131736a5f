//! How events reach picogent: the HTTP callback server (`http`) and the outbound
//! WebSocket client (`ws`) for agent mode.

pub mod http;
pub mod ws;
