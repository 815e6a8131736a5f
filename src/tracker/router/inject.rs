//! A chat message for a task whose run is going: passed into the run as an
//! instruction, done once the run has it in its session, or answered after the run
//! when it never read it.

use super::{lock, Job, JobKind, Router};
use crate::tracker::types::{ChatMessage, Report, TaskId};

impl Router {
    /// Passes a chat message to the task's running work as an instruction, to be read
    /// at its next step boundary. False when no such run is going.
    pub(super) fn inject(&self, event_id: &str, task_id: &TaskId, message: &ChatMessage) -> bool {
        if !self.shared.agent.live_control() {
            // The engine cannot take instructions mid-run: the message waits for the
            // run and is answered after it, in the same session.
            return false;
        }
        let control = lock(&self.shared.state)
            .running
            .get(task_id)
            .and_then(|r| r.control.clone());
        let Some(control) = control else { return false };
        let who = message.author.as_ref().and_then(|a| a.name.clone());
        let text = match &who {
            Some(name) => format!(
                "{name} writes on this task while you work on it:\n\n{}",
                message.content
            ),
            None => format!(
                "A message on this task while you work on it:\n\n{}",
                message.content
            ),
        };
        let Ok(receipt) = control.instruct_with_receipt(text, crate::agent::control::Role::User)
        else {
            return false;
        };
        tracing::info!(task = %task_id, message = %message.id, "chat message passed to the running task");
        // The event is done only once the message is durably in the run's session; a
        // run that ends without reading it leaves it to be answered after, as a chat
        // job. A crash before either replays the event.
        let settling = self.settling(task_id);
        self.shared.tasks.spawn(self.clone().settle_injection(
            settling,
            receipt,
            event_id.to_string(),
            task_id.clone(),
            message.clone(),
        ));
        true
    }

    /// Once the run has read an injected chat message, marks its event done after the
    /// answer is queued; when the run ended without reading it, queues it as the
    /// task's next chat job (or drops it, the task being cancelled).
    async fn settle_injection(
        self,
        _settling: super::Settling,
        receipt: tokio::sync::oneshot::Receiver<()>,
        event_id: String,
        task_id: TaskId,
        message: ChatMessage,
    ) {
        if receipt.await.is_ok() {
            let (done, event, task) = (self.clone(), event_id.clone(), task_id.clone());
            // Done once the answer is queued (a full disk delays it, never drops it).
            self.shared
                .delivery
                .queue_or_retry(
                    &task_id,
                    vec![Report::comment(
                        "Noted: I passed this to the work on this task that is under way; its result will take it into account.",
                        Some(message.id.clone()),
                    )],
                    vec![event_id.clone()],
                    move || done.mark_done(&event, &task),
                )
                .await;
        } else {
            let mut st = lock(&self.shared.state);
            if st.cancelled.contains(&task_id) {
                drop(st);
                tracing::info!(task = %task_id, message = %message.id, "the task was cancelled before its run read the chat message");
                self.mark_done(&event_id, &task_id);
                return;
            }
            tracing::info!(task = %task_id, message = %message.id, "the run ended before reading the chat message; it will be answered after");
            // Next for its task, before anything that came later.
            st.queue.push_front(Job {
                event_id,
                task_id,
                kind: JobKind::Chat {
                    message_id: message.id,
                    content: message.content,
                    author: message.author.and_then(|a| a.name),
                },
            });
            drop(st);
            self.schedule();
        }
    }
}
