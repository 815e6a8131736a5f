//! Skills: `SKILL.md` files with YAML front matter (`name`, `description`), in a folder
//! at any depth below a skills folder, or `.md` files directly in it (as pi finds them).
//! Only name, description and location reach the prompt; the model reads the body with
//! the read tool when a task calls for it. A skill's folder is readable by the tools
//! wherever it really lies (a skill reached through a symlink included) when its skills
//! folder is one the operator set up, not one inside the allowed paths; the model is
//! told that a skill's relative paths are relative to that folder.
//!
//! Lenient where the ecosystem is (pi, Claude Code): the folder name stands in for a
//! missing `name`, a byte-order mark is ignored, and a name that differs from its folder
//! or a description over 1,024 characters is a warning, not a refusal.
//! `disable-model-invocation: true` keeps a skill out of the prompt (it is still listed
//! at start, for people).

use std::path::{Path, PathBuf};

use gray_matter::engine::YAML;
use gray_matter::Matter;
use serde::Deserialize;

/// The description length the Agent Skills format allows.
const MAX_DESCRIPTION: usize = 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// Absolute, resolved path of the SKILL.md.
    location: PathBuf,
    /// The (resolved) folder holding it: readable by tools even outside allowed_paths.
    dir: PathBuf,
    /// `false` for `disable-model-invocation: true`: not offered to the model.
    pub model_invocable: bool,
    /// The skills folder it was found in (as configured, not resolved).
    from: PathBuf,
}

impl Skill {
    /// The skill's resolved folder.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The skills folder it was listed in.
    pub(crate) fn from(&self) -> &Path {
        &self.from
    }
}

#[derive(Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(rename = "disable-model-invocation")]
    disable_model_invocation: Option<bool>,
}

/// How deep below a skills folder a `SKILL.md` is looked for.
const MAX_DEPTH: usize = 6;
/// The most folders walked in one skills folder (a link to `/` must not walk the disk).
const MAX_FOLDERS: usize = 5000;
/// The most skill files taken from one skills folder.
const MAX_FILES: usize = 1000;

/// The skill files under one skills folder, as pi finds them (each folder once, at
/// most `MAX_FOLDERS`, whatever links there are): each `.md` file directly
/// in it, and each `SKILL.md` in a folder at any depth below it (a skill's folder is
/// not searched further; hidden folders and `node_modules` are skipped); sorted.
fn skill_files(dir: &Path) -> Vec<PathBuf> {
    let entries = |d: &Path| -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(d) else {
            return Vec::new();
        };
        let mut v: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        v.sort();
        v
    };
    let top = entries(dir);
    let mut out: Vec<PathBuf> = top
        .iter()
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "md"))
        .cloned()
        .collect();
    let mut stack: Vec<(PathBuf, usize)> = top
        .into_iter()
        .rev()
        .filter(|p| p.is_dir())
        .map(|p| (p, 1))
        .collect();
    // Each folder once, however links lead back to it.
    let mut seen = std::collections::HashSet::new();
    while let Some((folder, depth)) = stack.pop() {
        if out.len() >= MAX_FILES || seen.len() >= MAX_FOLDERS {
            tracing::warn!(
                "{}: more than {MAX_FILES} skills or {MAX_FOLDERS} folders; the rest are left out",
                dir.display()
            );
            break;
        }
        if !std::fs::canonicalize(&folder).is_ok_and(|real| seen.insert(real)) {
            continue;
        }
        let name = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') || name == "node_modules" {
            continue;
        }
        let file = folder.join("SKILL.md");
        if file.is_file() {
            out.push(file);
        } else if depth < MAX_DEPTH {
            let inner = entries(&folder).into_iter().rev().filter(|p| p.is_dir());
            stack.extend(inner.map(|p| (p, depth + 1)));
        }
    }
    out
}

/// Skills from `dirs`, most specific first: a name found earlier shadows a later one.
pub fn discover(dirs: &[PathBuf]) -> Vec<Skill> {
    let mut out: Vec<Skill> = Vec::new();
    for dir in dirs {
        for file in skill_files(dir) {
            match parse(&file) {
                Ok(mut skill) => {
                    skill.from = dir.clone();
                    if out.iter().any(|s| s.name == skill.name) {
                        tracing::debug!("skill {} in {} is shadowed", skill.name, file.display());
                    } else {
                        out.push(skill);
                    }
                }
                // A loose `.md` file (a README) need not be a skill.
                Err(why) if !is_skill_md(&file) => {
                    tracing::debug!("not a skill: {}: {why}", file.display())
                }
                Err(why) => tracing::warn!("skipping skill {}: {why}", file.display()),
            }
        }
    }
    out
}

fn is_skill_md(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == "SKILL.md")
}

fn parse(file: &Path) -> Result<Skill, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    if !text.trim_start().starts_with("---") {
        return Err("no YAML front matter (the file must start with ---)".into());
    }
    let parsed = Matter::<YAML>::new()
        .parse::<FrontMatter>(text)
        .map_err(|e| format!("invalid front matter: {e}"))?;
    let fm = parsed.data.ok_or("empty front matter")?;
    let location = std::fs::canonicalize(file).map_err(|e| e.to_string())?;
    let dir = location.parent().map(Path::to_path_buf).unwrap_or_default();
    // The folder as the user laid it out (not where a symlink leads) names the skill;
    // a loose `.md` file is named by itself.
    let folder = if is_skill_md(file) {
        file.parent().and_then(Path::file_name)
    } else {
        file.file_stem()
    }
    .map(|n| n.to_string_lossy().into_owned())
    .unwrap_or_default();
    let name = match fm.name.as_deref().map(str::trim).filter(|n| !n.is_empty()) {
        Some(n) => {
            if n != folder {
                tracing::warn!(
                    "skill {}: name {n:?} differs from its folder {folder:?}",
                    file.display()
                );
            }
            n.to_string()
        }
        None if !folder.is_empty() => folder,
        None => return Err("front matter has no `name`".into()),
    };
    let description = fm
        .description
        .filter(|d| !d.trim().is_empty())
        .ok_or("front matter has no `description`")?;
    let description = description.trim().to_string();
    if description.chars().count() > MAX_DESCRIPTION {
        tracing::warn!(
            "skill {}: the description has {} characters, more than the {MAX_DESCRIPTION} the skill format allows",
            file.display(),
            description.chars().count()
        );
    }
    Ok(Skill {
        name,
        description,
        location,
        dir,
        model_invocable: fm.disable_model_invocation != Some(true),
        from: PathBuf::new(),
    })
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The prompt section that lists the skills the model may use; empty when there are
/// none.
pub(crate) fn prompt_block(skills: &[Skill]) -> String {
    let offered: Vec<&Skill> = skills.iter().filter(|s| s.model_invocable).collect();
    if offered.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "The following skills provide specialized instructions for specific tasks. \
When a task matches a skill's description, read its file with the read tool before acting, \
and follow it. A skill's relative paths (scripts/x.py, reference.md) are relative to the \
skill's folder, the folder of its SKILL.md: resolve them against it before using them with a \
tool.\n\n<available_skills>\n",
    );
    for s in offered {
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
