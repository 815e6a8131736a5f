//! Project instructions: AGENTS.md (or CLAUDE.md) files in the system prompt.

use serde_json::json;

use crate::common::*;

fn system_of(llm: &ScriptedLlm) -> String {
    crate::common::llm::system_text(&llm.requests()[0].body)
}

#[tokio::test]
async fn agents_files_from_the_repository_down_to_the_working_folder_outermost_first() {
    let sb = Sandbox::new();
    // A repository with AGENTS.md at its top, CLAUDE.md in a folder without AGENTS.md,
    // and the working folder below; a file above the repository applies too (as pi
    // finds it), first.
    let repo = sb.work.join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("crates/core/src")).unwrap();
    std::fs::write(sb.work.join("AGENTS.md"), "OUTSIDE-REPO").unwrap();
    std::fs::write(repo.join("AGENTS.md"), "ROOT-RULES").unwrap();
    std::fs::write(repo.join("crates/CLAUDE.md"), "CLAUDE-RULES").unwrap();
    std::fs::write(repo.join("crates/core/AGENTS.md"), "CORE-RULES").unwrap();
    std::fs::write(repo.join("crates/core/CLAUDE.md"), "CORE-CLAUDE").unwrap();
    std::fs::create_dir_all(sb.user_home.join(".picogent")).unwrap();
    std::fs::write(sb.user_home.join(".picogent/AGENTS.md"), "GLOBAL-RULES").unwrap();
    let work = repo.join("crates/core/src");
    let llm = ScriptedLlm::start(vec![text("ok"), text("ok")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"work_dir": work}));
    run(&agent, "hi", "docs").await;
    let system = system_of(&llm);
    let at = |s: &str| {
        system
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing: {system}"))
    };
    assert!(at("GLOBAL-RULES") < at("OUTSIDE-REPO"));
    assert!(at("OUTSIDE-REPO") < at("ROOT-RULES"));
    assert!(at("ROOT-RULES") < at("CLAUDE-RULES"));
    assert!(at("CLAUDE-RULES") < at("CORE-RULES"));
    assert!(system.contains(&format!(
        "## {}\n\nROOT-RULES",
        repo.join("AGENTS.md").display()
    )));
    assert!(!system.contains("CORE-CLAUDE"));
    // The same bytes at every step of a run.
    let llm2 = ScriptedLlm::start(vec![tool("ls", json!({})), text("ok")]).await;
    let agent = sb.agent(&llm2, Wire::Anthropic, json!({"work_dir": work}));
    run(&agent, "hi", "docs2").await;
    let reqs = llm2.requests();
    assert_eq!(reqs[0].body["system"], reqs[1].body["system"]);
}

#[tokio::test]
async fn project_docs_are_capped_with_a_note_and_can_be_turned_off() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.work.join(".git")).unwrap();
    let big = format!("BEGIN{}END", "é".repeat(20 * 1024));
    std::fs::write(sb.work.join("AGENTS.md"), &big).unwrap();
    std::fs::create_dir_all(sb.work.join("sub")).unwrap();
    std::fs::write(sb.work.join("sub/AGENTS.md"), "SUB-RULES").unwrap();
    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"work_dir": sb.work.join("sub")}),
    );
    run(&agent, "hi", "cap").await;
    let system = system_of(&llm);
    assert!(system.contains("BEGIN") && !system.contains("END"));
    assert!(!system.contains("SUB-RULES"));
    assert!(system.contains(&format!(
        "[Project instructions cut at 32 KB: the rest of {} and {} were left out; read it with the read tool if needed.]",
        sb.work.join("AGENTS.md").display(),
        sb.work.join("sub/AGENTS.md").display()
    )));
    let start = system.find("BEGIN").unwrap();
    let end = system.find("\n\n[Project instructions cut").unwrap();
    assert!(end - start <= 32 * 1024, "{} bytes kept", end - start);

    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"work_dir": sb.work.join("sub"), "project_docs": false}),
    );
    run(&agent, "hi", "off").await;
    let system = system_of(&llm);
    assert!(!system.contains("BEGIN") && !system.contains("Project instructions"));
}

#[tokio::test]
async fn the_files_claude_code_and_codex_users_keep_apply_too() {
    let sb = Sandbox::new();
    let repo = sb.work.join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("app")).unwrap();
    // Codex's override wins over the folder's AGENTS.md; Claude Code's personal notes
    // follow the folder's file.
    std::fs::write(repo.join("AGENTS.md"), "PLAIN-AGENTS").unwrap();
    std::fs::write(repo.join("AGENTS.override.md"), "OVERRIDE-RULES").unwrap();
    std::fs::write(repo.join("app/CLAUDE.md"), "APP-CLAUDE").unwrap();
    std::fs::write(repo.join("app/CLAUDE.local.md"), "MY-LOCAL-NOTES").unwrap();
    // A link may name a file beside it, not one elsewhere (a secret of picogent's).
    std::fs::write(sb.work.join("secret.txt"), "SECRET-OUTSIDE").unwrap();
    std::os::unix::fs::symlink(sb.work.join("secret.txt"), repo.join("app/AGENTS.md")).unwrap();
    for (dir, file, text) in [
        (".claude", "CLAUDE.md", "CLAUDE-HOME"),
        (".codex", "AGENTS.md", "CODEX-HOME"),
    ] {
        std::fs::create_dir_all(sb.user_home.join(dir)).unwrap();
        std::fs::write(sb.user_home.join(dir).join(file), text).unwrap();
    }
    let work = repo.join("app");
    // Home files of other programs only with the opt-in.
    let llm = ScriptedLlm::start(vec![text("ok"), text("ok")]).await;
    let agent = sb.agent(&llm, Wire::Anthropic, json!({"work_dir": work}));
    run(&agent, "hi", "others-off").await;
    let system = system_of(&llm);
    assert!(
        !system.contains("CLAUDE-HOME") && !system.contains("CODEX-HOME"),
        "{system}"
    );
    let at = |s: &str| {
        system
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing: {system}"))
    };
    assert!(at("OVERRIDE-RULES") < at("APP-CLAUDE"));
    assert!(at("APP-CLAUDE") < at("MY-LOCAL-NOTES"));
    assert!(!system.contains("PLAIN-AGENTS"));
    assert!(
        !system.contains("SECRET-OUTSIDE"),
        "a link out of its folder is not read"
    );
    let llm = ScriptedLlm::start(vec![text("ok")]).await;
    let agent = sb.agent(
        &llm,
        Wire::Anthropic,
        json!({"work_dir": work, "pi_home": true}),
    );
    run(&agent, "hi", "others-on").await;
    let system = system_of(&llm);
    let at = |s: &str| {
        system
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing: {system}"))
    };
    assert!(at("CLAUDE-HOME") < at("CODEX-HOME"));
    assert!(at("CODEX-HOME") < at("OVERRIDE-RULES"));
}

#[tokio::test]
async fn above_the_repository_only_files_no_one_else_could_have_put_there_apply() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    // shared/ is writable by anyone (not sticky), public/ is sticky like /tmp; each holds
    // a repository whose working folder is the repository's top.
    let shared = sb.work.join("shared");
    let public = sb.work.join("public");
    for (d, mode) in [(&shared, 0o777), (&public, 0o1777)] {
        std::fs::create_dir_all(d.join("repo/.git")).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::write(shared.join("AGENTS.md"), "PLANTED-IN-SHARED").unwrap();
    // In the sticky folder: one of picogent's user's own, one another user owns, and one
    // anyone may change.
    std::fs::write(public.join("AGENTS.md"), "MINE-IN-PUBLIC").unwrap();
    std::fs::set_permissions(
        public.join("AGENTS.md"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    // A `.git` planted in the shared folder does not make it a repository's top.
    std::fs::create_dir_all(shared.join(".git")).unwrap();
    std::fs::set_permissions(shared.join(".git"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(public.join("CLAUDE.local.md"), "WRITABLE-BY-ALL").unwrap();
    std::fs::set_permissions(
        public.join("CLAUDE.local.md"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let other = sb.work.join("other");
    std::fs::create_dir_all(other.join("repo/.git")).unwrap();
    std::fs::write(other.join("AGENTS.md"), "SOMEONE-ELSES").unwrap();
    // Given to another user (root can; as anyone else, made world-writable instead).
    let nobody = 65534;
    if std::os::unix::fs::chown(other.join("AGENTS.md"), Some(nobody), Some(nobody)).is_err() {
        std::fs::set_permissions(
            other.join("AGENTS.md"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
    }
    let llm = ScriptedLlm::start(vec![text("ok"), text("ok"), text("ok")]).await;
    // In shared/, a folder of no repository: only the planted `.git` could make
    // shared/ its top.
    std::fs::create_dir_all(shared.join("plain")).unwrap();
    for w in [
        shared.join("plain"),
        public.join("repo"),
        other.join("repo"),
    ] {
        let agent = sb.agent(&llm, Wire::Anthropic, json!({"work_dir": w}));
        run(&agent, "hi", "docs").await;
    }
    let systems: Vec<String> = llm
        .requests()
        .iter()
        .map(|r| crate::common::llm::system_text(&r.body))
        .collect();
    assert!(!systems[0].contains("PLANTED-IN-SHARED"), "{}", systems[0]);
    assert!(systems[1].contains("MINE-IN-PUBLIC"), "{}", systems[1]);
    assert!(!systems[1].contains("WRITABLE-BY-ALL"), "{}", systems[1]);
    assert!(!systems[2].contains("SOMEONE-ELSES"), "{}", systems[2]);
}
