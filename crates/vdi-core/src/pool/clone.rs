//! Pool create, SPEC steps 5–7: cloning the members. One `VirtualMachineClone` per member
//! (version by discovery), watched together; each member is waited for with its own timeout,
//! labelled with the pool, made sure to be halted, and its finished clone object removed. A
//! clone that fails, stalls or is cancelled is deleted, and so is a VM it produced anyway, so
//! the result says exactly which members exist.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::free::Namespaced;
use super::{
    CLONE_FILTERS, CLONE_GROUP, CLONE_KIND, CLONE_PREFIX, CLONE_VERSIONS, CREATION_MARK_ANNOTATION,
    CancelHandle, CreatePool, FIELD_MANAGER, RUN_LABEL, cancelled, creation_mark,
    creation_mark_patch,
};
use crate::error::{
    Error, ErrorKind, MemberFailure, PoolCreateFailure, Result, describe, is_status,
};
use crate::labels::{MEMBER_LABEL, POOL_LABEL};
use crate::model::{CreateProgress, CreateStarted, CreateStep, MemberProgress, PoolCreated};

/// After a failed member's clone object is deleted, how long to wait before looking for a VM
/// that a clone controller still working on the old object may have created.
const CLEANUP_GRACE: Duration = Duration::from_millis(750);

/// Name of the VirtualMachineClone that makes `member`: `corral-vdi-clone-<member>`.
pub fn clone_name(member: &str) -> String {
    format!("{CLONE_PREFIX}{member}")
}

/// The VirtualMachineClone version to use among those the cluster serves: `v1beta1` if served,
/// else `v1alpha1`, else none (an unknown future version is not guessed at).
pub fn choose_clone_version<'a>(served: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let served: Vec<&str> = served.into_iter().collect();
    CLONE_VERSIONS
        .into_iter()
        .find(|preferred| served.contains(preferred))
}

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

/// The VirtualMachineClone API the cluster serves, found by discovery.
#[derive(Debug, Clone)]
pub struct CloneApi {
    /// The resource at the chosen version.
    pub resource: ApiResource,
    /// The chosen version (`v1beta1` or `v1alpha1`).
    pub version: String,
}

/// Finds the VirtualMachineClone API by discovery (group `clone.kubevirt.io`, version by
/// [`choose_clone_version`]).
///
/// Errors: [`Error::Rejected`] (`NotFound`) when the group or kind is not served (KubeVirt
/// missing, or too old); otherwise the discovery request's error.
pub async fn discover_clone_api(client: &Client) -> Result<CloneApi> {
    let missing = || {
        Error::rejected(
            ErrorKind::NotFound,
            "this cluster serves no VirtualMachineClone API (clone.kubevirt.io v1beta1 or \
             v1alpha1): KubeVirt is not installed, or too old to clone VMs",
            "install KubeVirt 1.0 or newer (kubectl get crd virtualmachineclones.clone.kubevirt.io \
             shows whether it is there), or pick the context of a cluster that has it",
        )
    };
    let group = match kube::discovery::group(client, CLONE_GROUP).await {
        Ok(group) => group,
        Err(kube::Error::Discovery(_)) => return Err(missing()),
        Err(e) => {
            return Err(Error::kube(
                format!("discover the {CLONE_KIND} API ({CLONE_GROUP})"),
                e,
            ));
        }
    };
    let version = choose_clone_version(group.versions()).ok_or_else(missing)?;
    let resource = group
        .versioned_resources(version)
        .into_iter()
        .map(|(resource, _)| resource)
        .find(|r| r.kind == CLONE_KIND)
        .ok_or_else(missing)?;
    Ok(CloneApi {
        resource,
        version: version.to_owned(),
    })
}

pub(super) fn status_of(obj: &DynamicObject) -> Value {
    obj.data.get("status").cloned().unwrap_or(Value::Null)
}

pub(super) fn phase_of(obj: &DynamicObject) -> String {
    status_of(obj)
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

pub(super) fn target_of(obj: &DynamicObject) -> Option<String> {
    obj.data
        .pointer("/spec/target/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The clone's condition message: the Ready condition's message (else reason), else the
/// Progressing condition's. KubeVirt puts the cause of a pending or failed clone there.
pub(super) fn condition_text(status: &Value) -> String {
    let conditions = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for kind in ["Ready", "Progressing"] {
        let Some(c) = conditions.iter().find(|c| c["type"] == kind) else {
            continue;
        };
        for field in ["message", "reason"] {
            if let Some(text) = c
                .get(field)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                return text.to_owned();
            }
        }
    }
    String::new()
}

/// `in phase X`, or `with no phase yet` before KubeVirt has set one.
pub(super) fn in_phase(phase: &str) -> String {
    if phase.is_empty() {
        "with no phase yet".to_owned()
    } else {
        format!("in phase {phase}")
    }
}

/// What the watch last said about one clone object.
#[derive(Debug, Clone, Default)]
struct CloneObs {
    /// The watch has seen the object.
    seen: bool,
    /// The watch saw it deleted.
    gone: bool,
    /// `status.phase` ("" before KubeVirt sets one).
    phase: String,
    /// [`condition_text`].
    message: String,
}

fn observe(obj: &DynamicObject) -> CloneObs {
    CloneObs {
        seen: true,
        gone: false,
        phase: phase_of(obj),
        message: condition_text(&status_of(obj)),
    }
}

/// A clone object this run created.
#[derive(Debug, Clone)]
struct CreatedClone {
    name: String,
    uid: Option<String>,
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
struct Outcome {
    member: String,
    failure: Option<MemberFailure>,
    leftovers: Vec<String>,
    warnings: Vec<String>,
}

/// Everything the member tasks of one create run share.
struct Run<'a, P> {
    scope: Namespaced,
    golden: String,
    run_id: String,
    clone_api: ApiResource,
    timeout: Duration,
    api_permits: Semaphore,
    clone_slots: Semaphore,
    bounded: bool,
    started: Instant,
    progress: &'a P,
    statuses: HashMap<String, watch::Receiver<CloneObs>>,
    watch_error: Arc<Mutex<Option<String>>>,
    events: Api<KubeEvent>,
    cancel: Option<CancelHandle>,
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

    async fn create_clone(&self, member: &str) -> std::result::Result<CreatedClone, kube::Error> {
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
        })
    }

    /// Creates (unless `pre` is the member's clone already), waits, then labels or cleans up.
    async fn member(&self, member: String, pre: Option<CreatedClone>) -> Outcome {
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

        // The creation mark goes on with the label where the clone could not write it
        // (v1alpha1); a mark already there, from the clone, is left as it is.
        let mut label = json!({ "metadata": { "labels": { POOL_LABEL: self.scope.pool } } });
        if !vm.annotations().contains_key(CREATION_MARK_ANNOTATION) {
            label["metadata"]["annotations"] = json!({
                CREATION_MARK_ANNOTATION: creation_mark(&created.name, &self.run_id)
            });
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
    async fn delete_clone(&self, created: &CreatedClone) -> Vec<String> {
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

/// A run id: 16 hex digits, random per run (a label value).
fn new_run_id() -> String {
    let seed = (Timestamp::now().as_nanosecond(), std::process::id());
    format!("{:016x}", RandomState::new().hash_one(seed))
}

/// Keeps the watch of this run's clone objects running; aborts it when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the clone objects labelled with this run's id and hands each one's state to the
/// member waiting for it.
async fn dispatch(
    api: Api<DynamicObject>,
    run_id: String,
    senders: HashMap<String, watch::Sender<CloneObs>>,
    watch_error: Arc<Mutex<Option<String>>>,
) {
    let config = watcher::Config::default().labels(&format!("{RUN_LABEL}={run_id}"));
    let mut stream = pin!(watcher::watcher(api, config).backoff(crate::watch::default_backoff()));
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
                if let Some(tx) = senders.get(&obj.name_any()) {
                    tx.send_replace(observe(&obj));
                }
                if let Ok(mut err) = watch_error.lock() {
                    *err = None;
                }
            }
            Ok(Event::Delete(obj)) => {
                if let Some(tx) = senders.get(&obj.name_any()) {
                    let mut obs = observe(&obj);
                    obs.gone = true;
                    tx.send_replace(obs);
                }
            }
            Ok(Event::Init | Event::InitDone) => {}
            Err(e) => {
                tracing::debug!(error = %e, "watching VirtualMachineClones failed; retrying");
                if let Ok(mut err) = watch_error.lock() {
                    *err = Some(e.to_string());
                }
            }
        }
    }
}

/// SPEC steps 5–7, once every check has passed: one `VirtualMachineClone` per member, the
/// first one alone as the lock against a racing create of the same pool (then the names are
/// checked free again), the others all at once; each waited for, labelled, and its clone
/// object removed, or cleaned up when it fails, stalls or is cancelled.
///
/// Errors: those listed on [`super::create_pool`] from "another create of the same pool got
/// there first" on.
pub(super) async fn clone_members<P>(
    client: &Client,
    request: &CreatePool,
    scope: Namespaced,
    clone_api: CloneApi,
    started: Instant,
    progress: P,
) -> Result<PoolCreated>
where
    P: Fn(CreateProgress) + Send + Sync,
{
    let ns = scope.namespace.clone();
    let pool = scope.pool.clone();
    let members = scope.members.clone();
    let mut senders = HashMap::new();
    let mut statuses = HashMap::new();
    for member in &members {
        let (tx, rx) = watch::channel(CloneObs::default());
        senders.insert(clone_name(member), tx);
        statuses.insert(clone_name(member), rx);
    }
    let slots = request
        .options
        .clone_concurrency
        .unwrap_or(members.len())
        .clamp(1, members.len());
    let run = Run {
        golden: request.golden.clone(),
        run_id: new_run_id(),
        clone_api: clone_api.resource.clone(),
        timeout: request.options.timeout,
        api_permits: Semaphore::new(request.options.api_concurrency.max(1)),
        clone_slots: Semaphore::new(slots),
        bounded: slots < members.len(),
        started,
        progress: &progress,
        statuses,
        watch_error: Arc::new(Mutex::new(None)),
        events: Api::namespaced(client.clone(), &ns),
        cancel: request.options.cancel.clone(),
        scope,
    };

    if request
        .options
        .cancel
        .as_ref()
        .is_some_and(CancelHandle::is_cancelled)
    {
        return Err(Error::rejected(
            ErrorKind::Other,
            format!("pool create of \"{pool}\" was cancelled before anything was created"),
            "run it again when you are ready",
        ));
    }
    // The first member's clone is the lock: of two racing creates, one gets AlreadyExists.
    let first = &members[0];
    let lock = match run.create_clone(first).await {
        Ok(lock) => lock,
        Err(e) if is_status(&e, 409) => {
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "{CLONE_KIND} \"{}\" already exists in namespace \"{ns}\": another create of \
                     pool \"{pool}\" got there first",
                    clone_name(first)
                ),
                format!(
                    "wait for it to finish and look with corral-vdi pool list -n {ns}; nothing was \
                     created by this run"
                ),
            ));
        }
        Err(e) => {
            return Err(Error::kube(
                format!(
                    "create {CLONE_KIND} \"{}\" in namespace \"{ns}\"",
                    clone_name(first)
                ),
                e,
            ));
        }
    };
    // Holding the lock, check again: a create that finished meanwhile, or debris, shows now.
    if let Err(e) = run.scope.check_free(Some(&run.run_id)).await {
        let _ = run.delete_clone(&lock).await;
        return Err(e);
    }

    progress(CreateProgress::Started(CreateStarted {
        namespace: ns.clone(),
        pool: pool.clone(),
        golden: request.golden.clone(),
        members: members.clone(),
        clone_api_version: clone_api.version.clone(),
        run_id: run.run_id.clone(),
    }));
    let _watch = AbortOnDrop(tokio::spawn(dispatch(
        run.scope.clones.clone(),
        run.run_id.clone(),
        senders,
        run.watch_error.clone(),
    )));

    let mut lock = Some(lock);
    let outcomes = futures::future::join_all(members.iter().map(|m| {
        let pre = if m == first { lock.take() } else { None };
        run.member(m.clone(), pre)
    }))
    .await;

    let mut created = Vec::new();
    let mut failed = Vec::new();
    let mut leftovers = Vec::new();
    let mut warnings = Vec::new();
    for outcome in outcomes {
        match outcome.failure {
            None => created.push(outcome.member),
            Some(failure) => failed.push(failure),
        }
        leftovers.extend(outcome.leftovers);
        warnings.extend(outcome.warnings);
    }
    if failed.is_empty() {
        return Ok(PoolCreated {
            namespace: ns,
            name: pool,
            golden: request.golden.clone(),
            members: created,
            clone_api_version: clone_api.version,
            elapsed_ms: u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX),
            warnings,
        });
    }
    leftovers.extend(warnings);
    Err(Error::PoolIncomplete(Box::new(PoolCreateFailure {
        namespace: ns,
        pool,
        requested: request.size,
        created,
        failed,
        leftovers,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_version_prefers_v1beta1() {
        assert_eq!(
            choose_clone_version(["v1beta1", "v1alpha1"]),
            Some("v1beta1")
        );
        assert_eq!(
            choose_clone_version(["v1alpha1", "v1beta1"]),
            Some("v1beta1")
        );
        assert_eq!(choose_clone_version(["v1alpha1"]), Some("v1alpha1"));
        assert_eq!(choose_clone_version(["v2"]), None);
        assert_eq!(choose_clone_version([]), None);
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

    #[test]
    fn condition_text_prefers_ready_then_progressing() {
        let status = json!({ "conditions": [
            { "type": "Progressing", "status": "False", "reason": "Pending" },
            { "type": "Ready", "status": "False", "reason": "Virtual Machine volume rootdisk does not support snapshots" },
        ] });
        assert_eq!(
            condition_text(&status),
            "Virtual Machine volume rootdisk does not support snapshots"
        );
        assert_eq!(condition_text(&json!({})), "");
    }
}
