//! One member of a clone run: its clone object created (the first one is the run's lock),
//! waited for with its own timeout while the run's watch reports it, then the VM labelled
//! with the pool and made sure to be halted and the clone object removed — or, when it fails,
//! stalls or is cancelled, the clone object and any VM it produced deleted, so the outcome
//! says exactly what exists.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::core::ApiResource;
use serde_json::json;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::super::clone_object::{clone_name, condition_text, in_phase, phase_of, status_of};
use super::super::free::Namespaced;
use super::super::{
    CLONE_FILTERS, CLONE_KIND, CREATION_MARK_ANNOTATION, CancelHandle, FIELD_MANAGER,
    GOLDEN_ANNOTATION, RUN_LABEL, cancelled, creation_mark, creation_mark_patch,
};
use crate::error::{MemberFailure, describe, is_status};
use crate::names::{MEMBER_LABEL, POOL_LABEL};
use crate::pool::{CreateProgress, CreateStep, MemberProgress};
use crate::resources::VirtualMachine;

/// After a failed member's clone object is deleted, how long to wait before looking for a VM
/// that a clone controller still working on the old object may have created.
const CLEANUP_GRACE: Duration = Duration::from_millis(750);

/// `3s`, `1m30s`, `2m`, `750ms`: a duration as a person writes it.
pub fn format_duration(d: Duration) -> String {
    let millis = d.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let sub = millis % 1000;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || sub > 0 || out.is_empty() {
        if sub > 0 && h == 0 && m == 0 {
            out.push_str(&format!(
                "{s}.{}s",
                format!("{sub:03}").trim_end_matches('0')
            ));
        } else {
            out.push_str(&format!("{s}s"));
        }
    }
    out
}

/// What the watch last said about one clone object.
#[derive(Debug, Clone, Default)]
pub(super) struct CloneObs {
    /// The watch has seen the object.
    pub(super) seen: bool,
    /// The watch saw it deleted.
    pub(super) gone: bool,
    /// `status.phase` ("" before KubeVirt sets one).
    pub(super) phase: String,
    /// [`condition_text`].
    pub(super) message: String,
}

pub(super) fn observe(obj: &DynamicObject) -> CloneObs {
    CloneObs {
        seen: true,
        gone: false,
        phase: phase_of(obj),
        message: condition_text(&status_of(obj)),
    }
}

/// A clone object this run created.
#[derive(Debug, Clone)]
pub(super) struct CreatedClone {
    name: String,
    uid: Option<String>,
    /// Its `creationTimestamp`: the VM it makes is created no earlier.
    created_at: Option<Timestamp>,
}

/// Why `vm` is not the VM the clone `created` made (whose creation mark is `mark`), if it is
/// not: created before the clone object, or marked by another clone.
fn not_made_by(vm: &VirtualMachine, created: &CreatedClone, mark: &str) -> Option<&'static str> {
    let before = vm
        .creation_timestamp()
        .zip(created.created_at)
        .is_some_and(|(vm, clone)| vm.0 < clone);
    let marked_else = vm
        .annotations()
        .get(CREATION_MARK_ANNOTATION)
        .is_some_and(|m| m != mark);
    if before {
        Some("it was created before the clone")
    } else if marked_else {
        Some("it carries another clone's creation mark")
    } else {
        None
    }
}

/// How waiting for one clone ended.
enum Waited {
    Succeeded,
    Failed(CloneObs),
    TimedOut(CloneObs),
    Vanished(CloneObs),
    Cancelled(CloneObs),
}

/// How one member ended.
pub(super) struct Outcome {
    pub(super) member: String,
    pub(super) failure: Option<MemberFailure>,
    pub(super) leftovers: Vec<String>,
    pub(super) warnings: Vec<String>,
}

/// Everything the member tasks of one create run share.
pub(super) struct Run<'a, P> {
    pub(super) scope: Namespaced,
    pub(super) golden: String,
    pub(super) run_id: String,
    pub(super) clone_api: ApiResource,
    pub(super) timeout: Duration,
    pub(super) api_permits: Semaphore,
    pub(super) clone_slots: Semaphore,
    pub(super) bounded: bool,
    pub(super) started: Instant,
    pub(super) progress: &'a P,
    pub(super) statuses: HashMap<String, watch::Receiver<CloneObs>>,
    pub(super) watch_error: Arc<Mutex<Option<String>>>,
    pub(super) events: Api<KubeEvent>,
    pub(super) cancel: Option<CancelHandle>,
}

impl<P: Fn(CreateProgress) + Send + Sync> Run<'_, P> {
    fn report(
        &self,
        member: &str,
        step: CreateStep,
        obs: Option<&CloneObs>,
        error: Option<String>,
    ) {
        let phase = obs.map(|o| o.phase.clone()).filter(|p| !p.is_empty());
        let message = obs.map(|o| o.message.clone()).filter(|m| !m.is_empty());
        let elapsed = u32::try_from(self.started.elapsed().as_millis()).unwrap_or(u32::MAX);
        (self.progress)(CreateProgress::Member(MemberProgress {
            member: member.to_owned(),
            clone: clone_name(member),
            step,
            phase,
            message,
            done: matches!(step, CreateStep::Done | CreateStep::Failed),
            error,
            elapsed_ms: elapsed,
        }));
    }

    fn clone_object(&self, member: &str) -> DynamicObject {
        let mut obj =
            DynamicObject::new(&clone_name(member), &self.clone_api).within(&self.scope.namespace);
        obj.metadata.labels = Some(BTreeMap::from([
            (POOL_LABEL.to_owned(), self.scope.pool.clone()),
            (MEMBER_LABEL.to_owned(), member.to_owned()),
            (RUN_LABEL.to_owned(), self.run_id.clone()),
        ]));
        obj.data = json!({
            "spec": {
                "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": self.golden },
                "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": member },
                "labelFilters": CLONE_FILTERS,
                "annotationFilters": CLONE_FILTERS,
            }
        });
        // v1alpha1 has no patches (the API server would prune them): there the label step
        // writes the mark.
        if self.clone_api.version != "v1alpha1" {
            obj.data["spec"]["patches"] =
                json!([creation_mark_patch(&clone_name(member), &self.run_id)]);
        }
        obj
    }

    pub(super) async fn create_clone(
        &self,
        member: &str,
    ) -> std::result::Result<CreatedClone, kube::Error> {
        let _permit = self.api_permits.acquire().await;
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let created = self
            .scope
            .clones
            .create(&params, &self.clone_object(member))
            .await?;
        Ok(CreatedClone {
            name: created.name_any(),
            uid: created.uid(),
            created_at: created.creation_timestamp().map(|t| t.0),
        })
    }

    /// Creates (unless `pre` is the member's clone already), waits, then labels or cleans up.
    pub(super) async fn member(&self, member: String, pre: Option<CreatedClone>) -> Outcome {
        let clone = clone_name(&member);
        if self.bounded {
            self.report(&member, CreateStep::Queued, None, None);
        }
        let _slot = self.clone_slots.acquire().await;
        if pre.is_none() && self.cancel.as_ref().is_some_and(CancelHandle::is_cancelled) {
            return self.failed(
                &member,
                "cancelled before its clone was created".into(),
                false,
                Vec::new(),
            );
        }
        let created = match pre {
            Some(created) => created,
            None => match self.create_clone(&member).await {
                Ok(created) => created,
                Err(e) => {
                    let why = if is_status(&e, 409) {
                        format!(
                            "{CLONE_KIND} \"{clone}\" was created by someone else meanwhile; it was \
                             left untouched"
                        )
                    } else {
                        format!(
                            "could not create {CLONE_KIND} \"{clone}\": {}",
                            describe(&e)
                        )
                    };
                    return self.failed(&member, why, false, Vec::new());
                }
            },
        };
        self.report(&member, CreateStep::CloneCreated, None, None);

        match self.wait_clone(&member, &clone).await {
            Waited::Succeeded => self.finish(&member, &created).await,
            Waited::Failed(obs) => {
                let why = format!(
                    "{CLONE_KIND} \"{clone}\" failed: {}",
                    if obs.message.is_empty() {
                        "KubeVirt gave no reason"
                    } else {
                        &obs.message
                    }
                );
                // Reported at once; the cleanup follows.
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, false, leftovers)
            }
            Waited::TimedOut(obs) => {
                let mut why = format!(
                    "timed out after {} waiting for {CLONE_KIND} \"{clone}\" to produce the VM: it is \
                     still {}",
                    format_duration(self.timeout),
                    in_phase(&obs.phase)
                );
                if !obs.message.is_empty() {
                    why.push_str(&format!(" ({})", obs.message));
                }
                if let Some(event) = self.last_event(&clone).await {
                    why.push_str(&format!("; last event: {event}"));
                }
                if let Some(err) = self.watch_error.lock().ok().and_then(|e| e.clone()) {
                    why.push_str(&format!("; watching clones failed: {err}"));
                }
                why.push_str(&format!(
                    "; see kubectl get virtualmachineclone -n {} {clone} (the clone object was \
                     deleted so that it cannot produce an unlabelled VM later)",
                    self.scope.namespace
                ));
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, true, leftovers)
            }
            Waited::Cancelled(obs) => {
                let why = format!(
                    "cancelled while waiting for {CLONE_KIND} \"{clone}\" ({}); the clone object \
                     was deleted",
                    in_phase(&obs.phase)
                );
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, false, leftovers)
            }
            Waited::Vanished(obs) => {
                let why = format!(
                    "{CLONE_KIND} \"{clone}\" was deleted by someone else {}",
                    in_phase(&obs.phase)
                );
                self.report(&member, CreateStep::Failed, Some(&obs), Some(why.clone()));
                let leftovers = self.clean_up(&member, &created).await;
                self.outcome(&member, why, false, leftovers)
            }
        }
    }

    fn failed(
        &self,
        member: &str,
        why: String,
        timed_out: bool,
        leftovers: Vec<String>,
    ) -> Outcome {
        self.report(member, CreateStep::Failed, None, Some(why.clone()));
        self.outcome(member, why, timed_out, leftovers)
    }

    fn outcome(
        &self,
        member: &str,
        message: String,
        timed_out: bool,
        leftovers: Vec<String>,
    ) -> Outcome {
        Outcome {
            member: member.to_owned(),
            failure: Some(MemberFailure {
                member: member.to_owned(),
                message,
                timed_out,
            }),
            leftovers,
            warnings: Vec::new(),
        }
    }

    /// Follows the clone through the shared watch until it succeeds, fails, vanishes or runs
    /// out of time, reporting each new phase or condition message.
    async fn wait_clone(&self, member: &str, clone: &str) -> Waited {
        let Some(rx) = self.statuses.get(clone) else {
            return Waited::TimedOut(CloneObs::default());
        };
        let mut rx = rx.clone();
        let deadline = Instant::now() + self.timeout;
        let mut shown: Option<(String, String)> = None;
        loop {
            let obs = rx.borrow_and_update().clone();
            if obs.gone {
                return Waited::Vanished(obs);
            }
            if obs.seen {
                let key = (obs.phase.clone(), obs.message.clone());
                if shown.as_ref() != Some(&key) {
                    self.report(member, CreateStep::Cloning, Some(&obs), None);
                    shown = Some(key);
                }
                match obs.phase.as_str() {
                    "Succeeded" => return Waited::Succeeded,
                    "Failed" => return Waited::Failed(obs),
                    _ => {}
                }
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The watch ended (it does not, short of an abort): wait out the time.
                        tokio::time::sleep_until(deadline).await;
                        return Waited::TimedOut(rx.borrow().clone());
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    return Waited::TimedOut(rx.borrow().clone());
                }
                () = cancelled(self.cancel.as_ref()) => {
                    return Waited::Cancelled(rx.borrow().clone());
                }
            }
        }
    }

    /// The newest Event about the clone object (warnings first), as `Reason: message`.
    async fn last_event(&self, clone: &str) -> Option<String> {
        let params = ListParams::default().fields(&format!("involvedObject.name={clone}"));
        let events = self.events.list(&params).await.ok()?.items;
        let when = |e: &KubeEvent| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(e.event_time.as_ref().map(|t| t.0))
                .unwrap_or(Timestamp::UNIX_EPOCH)
        };
        let newest = events
            .iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .max_by_key(|e| when(e))
            .or_else(|| events.iter().max_by_key(|e| when(e)))?;
        Some(format!(
            "{}: {}",
            newest.reason.as_deref().unwrap_or("(no reason)"),
            newest.message.as_deref().unwrap_or("")
        ))
    }

    /// The clone succeeded: label its VM (with the creation mark, if the clone could not write
    /// it), make sure it is halted, remove the clone object.
    async fn finish(&self, member: &str, created: &CreatedClone) -> Outcome {
        self.report(member, CreateStep::Labelling, None, None);
        let ns = &self.scope.namespace;
        let vm = {
            let _permit = self.api_permits.acquire().await;
            self.scope.vms.get_opt(member).await
        };
        let vm = match vm {
            Ok(Some(vm)) => vm,
            Ok(None) => {
                let leftovers = self.clean_up(member, created).await;
                let why = format!(
                    "{CLONE_KIND} \"{}\" succeeded but VirtualMachine \"{member}\" does not exist \
                     (deleted by someone else?)",
                    created.name
                );
                return self.failed(member, why, false, leftovers);
            }
            Err(e) => {
                let leftovers = self.clean_up(member, created).await;
                let why = format!(
                    "could not read the new VirtualMachine \"{member}\": {}",
                    describe(&e)
                );
                return self.failed(member, why, false, leftovers);
            }
        };

        // Only the VM this clone made is labelled: one created before the clone object, or
        // carrying another clone's creation mark, took the target name some other way (SPEC
        // "Pool list / delete": only what this product can prove it made).
        let mark = creation_mark(&created.name, &self.run_id);
        if let Some(not_ours) = not_made_by(&vm, created, &mark) {
            let leftovers = self.delete_clone(created).await;
            let why = format!(
                "VirtualMachine \"{member}\" is not the one {CLONE_KIND} \"{}\" made \
                 ({not_ours}): it was left alone, unlabelled",
                created.name
            );
            return self.failed(member, why, false, leftovers);
        }
        // The golden VM goes on with the label (`pool adopt` reads it), and the creation mark
        // where the clone could not write it (v1alpha1); a mark already there, from the clone,
        // is left as it is. The patch names the VM's uid: a VM replaced meanwhile is not
        // labelled (409).
        let mut label = json!({ "metadata": {
            "uid": vm.uid(),
            "labels": { POOL_LABEL: self.scope.pool },
            "annotations": { GOLDEN_ANNOTATION: self.golden },
        } });
        if !vm.annotations().contains_key(CREATION_MARK_ANNOTATION) {
            label["metadata"]["annotations"][CREATION_MARK_ANNOTATION] = json!(mark);
        }
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let labelled = {
            let _permit = self.api_permits.acquire().await;
            self.scope
                .vms
                .patch(member, &params, &Patch::Merge(&label))
                .await
        };
        if let Err(e) = labelled {
            // No half-labelled member: the unlabelled VM goes, or is reported exactly.
            let mut leftovers = self.delete_clone(created).await;
            let mut why = format!(
                "VirtualMachine \"{member}\" was cloned but could not be labelled: {}",
                describe(&e)
            );
            match self.delete_vm(member, vm.uid()).await {
                Ok(()) => why.push_str("; the unlabelled VM was deleted"),
                Err(del) => {
                    why.push_str("; the unlabelled VM could not be deleted either");
                    leftovers.push(format!(
                        "VirtualMachine {ns}/{member} exists without the pool label (delete refused: \
                         {}); remove it with kubectl delete vm -n {ns} {member}",
                        describe(&del)
                    ));
                }
            }
            return self.failed(member, why, false, leftovers);
        }

        let mut warnings = Vec::new();
        let halted = vm.spec.run_strategy.as_deref() == Some("Halted")
            || (vm.spec.run_strategy.is_none() && vm.spec.running != Some(true));
        if !halted {
            // KubeVirt creates clone targets halted; make sure of it without touching more.
            let halt = json!({ "spec": { "runStrategy": "Halted", "running": null } });
            let result = {
                let _permit = self.api_permits.acquire().await;
                self.scope
                    .vms
                    .patch(member, &params, &Patch::Merge(&halt))
                    .await
            };
            if let Err(e) = result {
                warnings.push(format!(
                    "member \"{member}\" could not be set to runStrategy Halted: {}; stop it with \
                     virtctl stop {member} -n {ns}",
                    describe(&e)
                ));
            }
        }
        for leftover in self.delete_clone(created).await {
            warnings.push(format!("finished {leftover}"));
        }
        self.report(member, CreateStep::Done, None, None);
        Outcome {
            member: member.to_owned(),
            failure: None,
            leftovers: Vec::new(),
            warnings,
        }
    }

    /// Deletes this run's clone object (only if it is still the one created: uid
    /// precondition); returns what could not be removed.
    pub(super) async fn delete_clone(&self, created: &CreatedClone) -> Vec<String> {
        let ns = &self.scope.namespace;
        let params = DeleteParams {
            preconditions: created.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        let result = {
            let _permit = self.api_permits.acquire().await;
            self.scope.clones.delete(&created.name, &params).await
        };
        match result {
            Ok(_) => Vec::new(),
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Vec::new(),
            Err(e) => vec![format!(
                "{CLONE_KIND} {ns}/{} could not be removed ({}); remove it with kubectl delete \
                 virtualmachineclone -n {ns} {}",
                created.name,
                describe(&e),
                created.name
            )],
        }
    }

    async fn delete_vm(
        &self,
        member: &str,
        uid: Option<String>,
    ) -> std::result::Result<(), kube::Error> {
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        let _permit = self.api_permits.acquire().await;
        match self.scope.vms.delete(member, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// After a member failed: delete its clone object (so it cannot produce a VM later), then a
    /// VM it produced anyway. The pool was checked free after this run took its lock, so a VM
    /// with a member's name whose clone this run created is this run's. Returns what could not
    /// be removed.
    async fn clean_up(&self, member: &str, created: &CreatedClone) -> Vec<String> {
        let ns = &self.scope.namespace;
        let mut leftovers = self.delete_clone(created).await;
        if !leftovers.is_empty() {
            leftovers.push(format!(
                "the clone object above may still create VirtualMachine {ns}/{member}; if it \
                 does, remove it with kubectl delete vm -n {ns} {member}"
            ));
        }
        // A controller that read the clone before it was deleted may still create the VM.
        for pass in 0..2 {
            if pass == 1 {
                tokio::time::sleep(CLEANUP_GRACE).await;
            }
            let vm = {
                let _permit = self.api_permits.acquire().await;
                self.scope.vms.get_opt(member).await
            };
            match vm {
                Ok(Some(vm)) => {
                    if let Err(e) = self.delete_vm(member, vm.uid()).await {
                        leftovers.push(format!(
                            "VirtualMachine {ns}/{member} exists without the pool label (delete \
                             refused: {}); remove it with kubectl delete vm -n {ns} {member}",
                            describe(&e)
                        ));
                        break;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    leftovers.push(format!(
                        "could not check whether VirtualMachine {ns}/{member} was created ({}); \
                         check with kubectl get vm -n {ns} {member}",
                        describe(&e)
                    ));
                    break;
                }
            }
        }
        leftovers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_vm_the_clone_made_is_taken_for_its_member() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let created = CreatedClone {
            name: "p-1-clone".into(),
            uid: None,
            created_at: Some("2026-12-06T10:00:00Z".parse().unwrap()),
        };
        let vm = |at: &str, mark: Option<&str>| {
            let mut vm = VirtualMachine::new("p-1", Default::default());
            vm.metadata.creation_timestamp = Some(Time(at.parse().unwrap()));
            vm.metadata.annotations =
                mark.map(|m| [(CREATION_MARK_ANNOTATION.to_owned(), m.to_owned())].into());
            vm
        };
        let mark = "p-1-clone/run";
        assert_eq!(
            not_made_by(&vm("2026-12-06T10:00:05Z", Some(mark)), &created, mark),
            None
        );
        assert_eq!(
            not_made_by(&vm("2026-12-06T10:00:05Z", None), &created, mark),
            None
        );
        assert!(not_made_by(&vm("2026-12-06T09:00:00Z", None), &created, mark).is_some());
        assert!(
            not_made_by(
                &vm("2026-12-06T10:00:05Z", Some("other/run")),
                &created,
                mark
            )
            .is_some()
        );
    }

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
    }
}
