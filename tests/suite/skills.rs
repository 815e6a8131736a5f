//! Skills: discovery, shadowing, and progressive loading into the prompt.

use picogent::agent::skills::discover;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn the_prompt_lists_skills_without_their_bodies() {
    let sb = Sandbox::new();
    let loc = sb.add_skill(
        "review",
        "Code review: bugs, style & <performance>",
        "SECRET-BODY-TEXT",
    );
    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    run(&agent, "hi", "sk").await;
    let system = crate::common::llm::system_text(&llm.requests()[0].body);
    assert!(system.contains("<available_skills>"));
    assert!(system.contains("<name>review</name>"));
    assert!(system
        .contains("<description>Code review: bugs, style &amp; &lt;performance&gt;</description>"));
    assert!(system.contains(&format!("<location>{}</location>", loc.display())));
    assert!(!system.contains("SECRET-BODY-TEXT"));
    assert!(system.contains("read its file with the read tool"));
}

#[test]
fn bad_skills_are_skipped_and_local_skills_shadow_global_ones() {
    let sb = Sandbox::new();
    sb.add_skill("review", "local review", "");
    let bad = sb.home.join("skills/broken");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("SKILL.md"), "# no front matter\n").unwrap();
    let nodesc = sb.home.join("skills/nodesc");
    std::fs::create_dir_all(&nodesc).unwrap();
    std::fs::write(nodesc.join("SKILL.md"), "---\nname: nodesc\n---\nbody\n").unwrap();
    let global = sb.user_home.join(".picogent/skills");
    for (name, desc) in [("review", "global review"), ("deploy", "global deploy")] {
        std::fs::create_dir_all(global.join(name)).unwrap();
        std::fs::write(
            global.join(name).join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {desc}\n---\n"),
        )
        .unwrap();
    }
    let skills = discover(&[sb.home.join("skills"), global]);
    let got: Vec<(&str, &str)> = skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str()))
        .collect();
    assert_eq!(
        got,
        [("review", "local review"), ("deploy", "global deploy")]
    );
}

/// Writes `<dir>/SKILL.md` with the given front matter lines and body.
fn skill_file(dir: &std::path::Path, front: &str, body: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("SKILL.md");
    std::fs::write(&p, format!("---\n{front}\n---\n{body}\n")).unwrap();
    p
}

#[tokio::test]
async fn a_skill_reached_through_a_symlink_is_readable_under_allowed_paths() {
    let sb = Sandbox::new();
    // The skill lives in a shared folder outside allowed_paths, linked into skills/.
    let shared = sb.base().join("shared-skills/pdf");
    skill_file(
        &shared,
        "name: pdf\ndescription: PDF work",
        "PDF-SKILL-BODY",
    );
    std::fs::create_dir_all(sb.home.join("skills")).unwrap();
    std::os::unix::fs::symlink(&shared, sb.home.join("skills/pdf")).unwrap();
    let real = std::fs::canonicalize(shared.join("SKILL.md")).unwrap();
    let llm = ScriptedLlm::start(vec![
        tool("read", json!({"path": real.display().to_string()})),
        tool("ls", json!({"path": shared.display().to_string()})),
        text("done"),
    ])
    .await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"allowed_paths": [sb.work.display().to_string()]}),
    );
    let (_, outcome) = run(&agent, "make a pdf", "sl").await;
    assert_eq!(final_text(&outcome), "done");
    let reqs = llm.requests();
    let system = crate::common::llm::system_text(&reqs[0].body);
    assert!(system.contains(&format!("<location>{}</location>", real.display())));
    let (read, read_err) = last_tool_result(&reqs[1].body);
    assert!(!read_err && read.contains("PDF-SKILL-BODY"), "{read}");
    let (ls, ls_err) = last_tool_result(&reqs[2].body);
    assert!(!ls_err && ls.contains("SKILL.md"), "{ls}");
}

#[tokio::test]
async fn the_prompt_says_relative_paths_resolve_against_the_skill_folder() {
    let sb = Sandbox::new();
    sb.add_skill("review", "review code", "run scripts/check.py");
    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({}));
    run(&agent, "hi", "rel").await;
    let system = crate::common::llm::system_text(&llm.requests()[0].body);
    assert!(system.contains(
        "A skill's relative paths (scripts/x.py, reference.md) are relative to the skill's folder"
    ));
}

#[tokio::test]
async fn skills_come_from_agents_folders_nested_groups_and_lenient_front_matter() {
    let sb = Sandbox::new();
    let local = sb.work.join(".agents/skills");
    // One level of nesting: skills/<group>/<name>/SKILL.md.
    skill_file(&local.join("docs/pdf"), "description: PDF files", "");
    // A byte-order mark before the front matter.
    std::fs::create_dir_all(local.join("bom")).unwrap();
    std::fs::write(
        local.join("bom/SKILL.md"),
        "\u{feff}---\nname: bom\ndescription: with a BOM\n---\n",
    )
    .unwrap();
    // Listed for people, hidden from the model.
    skill_file(
        &local.join("manual"),
        "name: manual\ndescription: only by hand\ndisable-model-invocation: true",
        "",
    );
    // A name that differs from its folder, and a long description: kept (warned).
    let long = "x".repeat(1100);
    skill_file(
        &local.join("folder"),
        &format!("name: other\ndescription: {long}"),
        "",
    );
    let global = sb.user_home.join(".agents/skills");
    skill_file(&global.join("deploy"), "description: ship it", "");
    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let config = sb.config(&llm, Wire::Anthropic, json!({}));
    let skills = discover(&config.skill_dirs());
    let got: Vec<(&str, bool)> = skills
        .iter()
        .map(|s| (s.name.as_str(), s.model_invocable))
        .collect();
    assert_eq!(
        got,
        [
            ("bom", true),
            ("pdf", true),
            ("other", true),
            ("manual", false),
            ("deploy", true)
        ]
    );
    run(&agent_from(config), "hi", "nest").await;
    let system = crate::common::llm::system_text(&llm.requests()[0].body);
    assert!(system.contains("<name>pdf</name>") && system.contains("<name>deploy</name>"));
    assert!(!system.contains("manual"), "{system}");
}

#[tokio::test]
async fn skills_are_found_where_pi_finds_them_and_pis_home_only_when_asked() {
    let sb = Sandbox::new();
    // The working folder is deep in a repository that sits in a folder with skills of
    // its own, outside the repository.
    let repo = sb.work.join("repo");
    let work = repo.join("pkg/app");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    skill_file(
        &sb.work.join(".agents/skills/outside"),
        "description: above the repository",
        "",
    );
    skill_file(
        &repo.join(".agents/skills/top"),
        "description: at the repository's top",
        "",
    );
    skill_file(
        &repo.join("pkg/.agents/skills/mid"),
        "description: between",
        "",
    );
    // Any depth below a skills folder, a loose .md file with front matter, and a README
    // that is not a skill.
    skill_file(
        &work.join(".agents/skills/a/b/c/deep"),
        "description: three groups down",
        "",
    );
    std::fs::write(
        work.join(".agents/skills/loose.md"),
        "---\ndescription: a skill in one file\n---\nbody\n",
    )
    .unwrap();
    std::fs::write(work.join(".agents/skills/README.md"), "# Our skills\n").unwrap();
    skill_file(
        &work.join(".pi/skills/pi-project"),
        "description: pi's project folder",
        "",
    );
    // pi's own user folder and instructions: read only with pi_home.
    let pi = sb.user_home.join(".pi/agent");
    skill_file(
        &pi.join("skills/pi-user"),
        "description: pi's user skill",
        "",
    );
    std::fs::write(pi.join("AGENTS.md"), "PI-HOME-INSTRUCTIONS\n").unwrap();

    let llm = ScriptedLlm::start(vec![text("ok"), text("ok")]).await;
    let names = |config: &picogent::config::Config| -> Vec<String> {
        discover(&config.skill_dirs())
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    let config = sb.config(&llm, Wire::Anthropic, json!({"work_dir": work}));
    assert_eq!(
        names(&config),
        ["loose", "deep", "mid", "top", "pi-project"]
    );
    run(&agent_from(config), "hi", "pi-off").await;
    let system = crate::common::llm::system_text(&llm.requests()[0].body);
    assert!(!system.contains("PI-HOME-INSTRUCTIONS"));

    let config = sb.config(
        &llm,
        Wire::Anthropic,
        json!({"work_dir": work, "pi_home": true}),
    );
    assert_eq!(
        names(&config),
        ["loose", "deep", "mid", "top", "pi-project", "pi-user"]
    );
    run(&agent_from(config), "hi", "pi-on").await;
    let system = crate::common::llm::system_text(&llm.requests()[1].body);
    assert!(system.contains("PI-HOME-INSTRUCTIONS"), "{system}");
    assert!(system.contains("<name>pi-user</name>"));
}

/// Claude Code's places: a project's `.claude/skills/`, and `~/.claude/skills/` only
/// with the same opt-in as pi's home.
#[tokio::test]
async fn skills_are_found_where_claude_code_keeps_them() {
    let sb = Sandbox::new();
    skill_file(
        &sb.work.join(".claude/skills/cc-project"),
        "description: a Claude Code project skill",
        "",
    );
    skill_file(
        &sb.user_home.join(".claude/skills/cc-user"),
        "description: a Claude Code user skill",
        "",
    );
    let llm = ScriptedLlm::start(vec![]).await;
    let names = |config: &picogent::config::Config| -> Vec<String> {
        discover(&config.skill_dirs())
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    let config = sb.config(&llm, Wire::Anthropic, json!({}));
    assert_eq!(names(&config), ["cc-project"]);
    let config = sb.config(&llm, Wire::Anthropic, json!({"pi_home": true}));
    assert_eq!(names(&config), ["cc-project", "cc-user"]);
}

/// A skills folder inside the allowed paths is the model's to write: a link it makes
/// there to a folder outside must not make that folder readable at the next start.
#[tokio::test]
async fn a_link_in_a_skills_folder_the_model_writes_does_not_widen_what_tools_read() {
    let sb = Sandbox::new();
    let outside = sb.base().join("private");
    skill_file(&outside, "name: private\ndescription: bait", "PRIVATE-BODY");
    std::fs::write(outside.join("secret.txt"), "PRIVATE-SECRET\n").unwrap();
    let skills = sb.work.join(".pi/skills");
    std::fs::create_dir_all(&skills).unwrap();
    std::os::unix::fs::symlink(&outside, skills.join("private")).unwrap();
    let secret = std::fs::canonicalize(outside.join("secret.txt")).unwrap();
    let llm = ScriptedLlm::start(vec![
        tool("read", json!({"path": secret.display().to_string()})),
        text("done"),
    ])
    .await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"allowed_paths": [sb.work.display().to_string()]}),
    );
    run(&agent, "read it", "widen").await;
    let (read, read_err) = last_tool_result(&llm.requests()[1].body);
    assert!(read_err && !read.contains("PRIVATE-SECRET"), "{read}");
}
