//! The system prompt: the agent's role, the tools and the working folder, the project's
//! instructions (AGENTS.md), the skills. Built once per run: every model call of a run
//! sends the same bytes.

use std::path::Path;

use super::skills::{prompt_block, Skill};

const DEFAULT_ROLE: &str = "You are picogent, a careful coding agent. You work inside a real \
folder with real tools: look before you change anything, make the smallest change that does \
the job, check your work by running it, and finish with a short answer that says what you did.";

// The tools describe themselves in the request's tool list (MCP tools included); a
// second list here cost every request ~80 tokens and went stale when tools changed.
const TOOL_HABITS: &str = "Use tools through the tool-calling interface, never by writing calls as text. \
Prefer read, grep, find and ls over bash for looking at files. Paths are relative to the working folder.";

pub(crate) fn build(
    role: Option<&str>,
    work_dir: &Path,
    allowed_paths: &[std::path::PathBuf],
    skills: &[Skill],
    project_docs: &str,
) -> String {
    let mut out = String::new();
    out.push_str(
        role.filter(|r| !r.trim().is_empty())
            .unwrap_or(DEFAULT_ROLE),
    );
    out.push_str("\n\n");
    out.push_str(TOOL_HABITS);
    out.push_str(&format!("\n\nWorking folder: {}", work_dir.display()));
    if !allowed_paths.is_empty() {
        let list: Vec<String> = allowed_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        out.push_str(&format!(
            "\nYou may only touch files under: {}",
            list.join(", ")
        ));
    }
    out.push_str(&format!(
        "\nToday's date: {}",
        chrono::Utc::now().format("%Y-%m-%d")
    ));
    if !project_docs.is_empty() {
        out.push_str("\n\n");
        out.push_str(project_docs);
    }
    let block = prompt_block(skills);
    if !block.is_empty() {
        out.push_str("\n\n");
        out.push_str(&block);
    }
    out
}
