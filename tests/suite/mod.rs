mod agent_loop;
mod cli;
mod config;
mod providers;
mod sandbox;
mod sessions;
mod skills;
mod tools;
