//! Skills: `skills/<name>/SKILL.md` files with YAML front matter (`name`,
//! `description`). Only name, description and location reach the prompt; the model
//! reads the body with the read tool when a task calls for it.

use std::path::{Path, PathBuf};

use gray_matter::engine::YAML;
use gray_matter::Matter;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// Absolute path of the SKILL.md.
    location: PathBuf,
    /// The folder holding it (readable by tools even outside allowed_paths).
    dir: PathBuf,
}

#[derive(Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
}

/// Skills from `dirs`, most specific first: a name found earlier shadows a later one.
pub fn discover(dirs: &[PathBuf]) -> Vec<Skill> {
    let mut out: Vec<Skill> = Vec::new();
    for dir in dirs {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut folders: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        folders.sort();
        for folder in folders {
            let file = folder.join("SKILL.md");
            if !file.is_file() {
                continue;
            }
            match parse(&file) {
                Ok(skill) => {
                    if out.iter().any(|s| s.name == skill.name) {
                        tracing::debug!("skill {} in {} is shadowed", skill.name, file.display());
                    } else {
                        out.push(skill);
                    }
                }
                Err(why) => tracing::warn!("skipping skill {}: {why}", file.display()),
            }
        }
    }
    out
}

fn parse(file: &Path) -> Result<Skill, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    if !text.trim_start().starts_with("---") {
        return Err("no YAML front matter (the file must start with ---)".into());
    }
    let parsed = Matter::<YAML>::new()
        .parse::<FrontMatter>(&text)
        .map_err(|e| format!("invalid front matter: {e}"))?;
    let fm = parsed.data.ok_or("empty front matter")?;
    let name = fm
        .name
        .filter(|n| !n.trim().is_empty())
        .ok_or("front matter has no `name`")?;
    let description = fm
        .description
        .filter(|d| !d.trim().is_empty())
        .ok_or("front matter has no `description`")?;
    let location = std::fs::canonicalize(file).map_err(|e| e.to_string())?;
    let dir = location.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(Skill {
        name: name.trim().to_string(),
        description: description.trim().to_string(),
        location,
        dir,
    })
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The prompt section that lists skills; empty when there are none.
pub(crate) fn prompt_block(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "The following skills provide specialized instructions for specific tasks. \
When a task matches a skill's description, read its file with the read tool before acting, \
and follow it.\n\n<available_skills>\n",
    );
    for s in skills {
        out.push_str(&format!(
            "  <skill>\n    <name>{}</name>\n    <description>{}</description>\n    <location>{}</location>\n  </skill>\n",
            escape(&s.name),
            escape(&s.description),
            escape(&s.location.display().to_string())
        ));
    }
    out.push_str("</available_skills>");
    out
}
