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
