//! A model server on this machine, for a newcomer without a key: Ollama, or an
//! OpenAI-compatible server (llama.cpp, LM Studio, vLLM) on its usual port, found by
//! asking each for its models (half a second each at most).

use serde::Deserialize;

#[derive(Deserialize)]
struct OllamaTags {
    #[serde(default)]
    models: Vec<OllamaModel>,
}

#[derive(Deserialize)]
struct OllamaModel {
    name: String,
}

#[derive(Deserialize)]
struct OpenAiModels {
    #[serde(default)]
    data: Vec<OpenAiModel>,
}

#[derive(Deserialize)]
struct OpenAiModel {
    id: String,
}

/// How to use the first model server that answers with its models, if one does.
pub async fn model_server() -> Option<String> {
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(500))
        .build()
        .ok()?;
    async fn get<T: serde::de::DeserializeOwned>(http: &reqwest::Client, url: &str) -> Option<T> {
        http.get(url).send().await.ok()?.json::<T>().await.ok()
    }
    let ollama = "http://127.0.0.1:11434";
    if let Some(tags) = get::<OllamaTags>(&http, &format!("{ollama}/api/tags")).await {
        let models: Vec<&str> = tags.models.iter().map(|m| m.name.as_str()).collect();
        let first = models.first()?;
        return Some(format!(
            "found Ollama at {ollama} with models: {}; run with PICOGENT_PROVIDER=ollama PICOGENT_MODEL={first}",
            models.join(", ")
        ));
    }
    for (port, what) in [(8080, "llama.cpp"), (1234, "LM Studio"), (8000, "vLLM")] {
        let base = format!("http://127.0.0.1:{port}/v1");
        let Some(list) = get::<OpenAiModels>(&http, &format!("{base}/models")).await else {
            continue;
        };
        let models: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
        let Some(first) = models.first() else {
            continue;
        };
        return Some(format!(
            "found an OpenAI-compatible server ({what}?) at {base} with models: {}; run with PICOGENT_PROVIDER=openai PICOGENT_BASE_URL={base} PICOGENT_MODEL={first}",
            models.join(", ")
        ));
    }
    None
}
