//! The `canopy:hooks@0.1.0` contract adapted onto 0.2.0: a plugin built against 0.1.0 keeps
//! working unchanged. Its calls are made with 0.2.0's values turned into 0.1.0's, and what it
//! answers and asks of the host is turned back; the host itself speaks 0.2.0 only.
//!
//! What 0.1.0 cannot say is left out: a 0.1.0 plugin sees a graph-shaped provenance (empty
//! graph fields for a cron or a webhook), never a decision input, and never answers a decision
//! (as a sync hook, its completed call allows).

use super::bindings::v0_1::canopy::hooks::{host as old_host, types as old};
use super::bindings::v0_2::canopy::hooks::{host as new_host, types as new};
use super::call::CallState;

pub(crate) fn manifest(m: old::Manifest) -> new::Manifest {
    new::Manifest {
        name: m.name,
        version: m.version,
        modes: m.modes,
        capabilities: m.capabilities,
        config_schema: m.config_schema,
        templates: m
            .templates
            .into_iter()
            .map(|t| new::TemplateField {
                field: t.field,
                escape: match t.escape {
                    old::Escape::Plain => new::Escape::Plain,
                    old::Escape::Shell => new::Escape::Shell,
                },
            })
            .collect(),
        // 0.1.0 has no decisions: none of its modes answers as a sync hook.
        decides: Vec::new(),
    }
}

fn provenance(p: &new::Provenance) -> old::Provenance {
    let graph = p.graph.as_ref();
    old::Provenance {
        graph_id: graph.map(|g| g.id.clone()).unwrap_or_default(),
        graph_name: graph.map(|g| g.name.clone()).unwrap_or_default(),
        run_id: p.run_id.clone().unwrap_or_default(),
        event: p.event.clone(),
        hook_index: p.hook_index,
        spec_id: p.spec_id.clone(),
    }
}

pub(crate) fn invocation(i: &new::Invocation) -> old::Invocation {
    old::Invocation {
        mode: i.mode.clone(),
        config: i.config.clone(),
        markers: i.markers.clone(),
        workdir: i.workdir.clone(),
        provenance: provenance(&i.provenance),
        deadline_ms: i.deadline_ms,
        resume_session: i.resume_session.clone(),
    }
}

pub(crate) fn outcome(o: old::Outcome) -> new::Outcome {
    new::Outcome {
        status: match o.status {
            old::Status::Completed => new::Status::Completed,
            old::Status::Failed(reason) => new::Status::Failed(reason),
            old::Status::Blocked(blocker) => new::Status::Blocked(blocker),
        },
        summary: o.summary,
        detail: o.detail,
        harness_session: o.harness_session,
        decision: None,
    }
}

impl old::Host for CallState {}

impl old_host::Host for CallState {
    async fn log(&mut self, level: old::Level, message: String) {
        let level = match level {
            old::Level::Trace => new::Level::Trace,
            old::Level::Debug => new::Level::Debug,
            old::Level::Info => new::Level::Info,
            old::Level::Warn => new::Level::Warn,
            old::Level::Error => new::Level::Error,
        };
        new_host::Host::log(self, level, message).await;
    }

    async fn run_command(&mut self, cmd: old::Command) -> Result<old::Exit, String> {
        let cmd = new::Command {
            program: cmd.program,
            args: cmd.args,
            cwd: cmd.cwd,
            env: cmd.env,
            stdin: cmd.stdin,
            timeout_ms: cmd.timeout_ms,
            capture_result: cmd.capture_result,
        };
        let exit = new_host::Host::run_command(self, cmd).await?;
        Ok(old::Exit {
            code: exit.code,
            timed_out: exit.timed_out,
            stdout: exit.stdout,
            stderr: exit.stderr,
            duration_ms: exit.duration_ms,
            result: exit.result,
        })
    }

    async fn enqueue_message(
        &mut self,
        target: old::SessionTarget,
        text: String,
        claimed: old::Provenance,
    ) -> Result<String, String> {
        let target = match target {
            old::SessionTarget::Id(id) => new::SessionTarget::Id(id),
            old::SessionTarget::Name(name) => new::SessionTarget::Name(name),
        };
        // The host stamps the call's own provenance whatever a plugin claims; 0.1.0 cannot
        // name the origin, so the claim carries the call's.
        let origin = self
            .provenance()
            .map(|p| super::call::origin_to_wit(&p.origin))
            .unwrap_or(new::Origin::Manual);
        let graph = (!claimed.graph_id.is_empty()).then_some(new::GraphRef {
            id: claimed.graph_id,
            name: claimed.graph_name,
        });
        let claimed = new::Provenance {
            origin,
            graph,
            run_id: (!claimed.run_id.is_empty()).then_some(claimed.run_id),
            event: claimed.event,
            hook_index: claimed.hook_index,
            spec_id: claimed.spec_id,
        };
        new_host::Host::enqueue_message(self, target, text, claimed).await
    }

    async fn agent_platform(&mut self, name: String) -> Result<old::Platform, String> {
        let platform = new_host::Host::agent_platform(self, name).await?;
        Ok(old::Platform {
            command: platform.command,
            model_args: platform.model_args,
            effort_args: platform.effort_args,
            resume_args: platform.resume_args,
        })
    }
}
