//! Where a VM may be scheduled: the rules of its template that admission can judge, applied to
//! each node the way the scheduler's filters do.
//!
//! - `spec.unschedulable` (a cordoned node) takes no new pod (scheduler plugin
//!   `NodeUnschedulable`).
//! - A taint with effect `NoSchedule` or `NoExecute` keeps a pod off unless one of its
//!   tolerations matches (plugin `TaintToleration`; matching as in `k8s.io/api/core/v1`
//!   `Toleration.ToleratesTaint`: an empty effect matches every effect, an empty key with
//!   operator `Exists` every key, `Exists` any value, `Equal` (the default) the same value).
//!   The launcher pod gets the VMI's `spec.tolerations`.
//! - `spec.nodeSelector`, plus `kubevirt.io/schedulable: "true"`, which KubeVirt adds to every
//!   launcher pod (`pkg/virt-controller/services/template.go`), must all match node labels
//!   (plugin `NodeAffinity`).
//! - `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`: one of its
//!   `nodeSelectorTerms` must match, a term matching when all its `matchExpressions` do
//!   (`k8s.io/component-helpers/scheduling/corev1/nodeaffinity`). Plain label matches are
//!   judged (`In`, `NotIn`, `Exists`, `DoesNotExist`); a term that needs `Gt`, `Lt` or
//!   `matchFields` is not, and a node it might exclude is counted, with a note.
//!
//! Preferred affinity, pod (anti-)affinity, topology spread and CPU/memory are not judged:
//! admission counts devices, and the scheduler has the last word.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::objects::{NodeDevices, SCHEDULABLE_LABEL, Taint};

/// A toleration of the VM template (`spec.tolerations[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Toleration {
    /// `key`; empty with operator `Exists` tolerates every taint.
    pub key: String,
    /// `operator`: `Equal` (the default) or `Exists`.
    pub operator: String,
    /// `value`.
    pub value: String,
    /// `effect`; empty tolerates every effect.
    pub effect: String,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes' `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator.as_str() {
            "" | "Equal" => self.value == taint.value,
            "Exists" => true,
            _ => false,
        }
    }
}

/// One `matchExpressions` entry of a node selector term.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    pub operator: String,
    /// The values (`In`, `NotIn`: any of; `Gt`, `Lt`: one number).
    pub values: Vec<String>,
}

/// One `nodeSelectorTerms` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Term {
    /// `matchExpressions` (on node labels).
    pub match_expressions: Vec<Requirement>,
    /// `matchFields` (on node fields), kept only to know that the term has some.
    pub match_fields: Vec<Value>,
}

/// Three-valued: a rule admission cannot judge is `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    Yes,
    No,
    Unknown,
}

impl Requirement {
    fn judge(&self, labels: &BTreeMap<String, String>) -> Judged {
        let value = labels.get(&self.key);
        let yes = |b: bool| if b { Judged::Yes } else { Judged::No };
        match self.operator.as_str() {
            "In" => yes(value.is_some_and(|v| self.values.contains(v))),
            "NotIn" => yes(value.is_none_or(|v| !self.values.contains(v))),
            "Exists" => yes(value.is_some()),
            "DoesNotExist" => yes(value.is_none()),
            _ => Judged::Unknown,
        }
    }
}

impl Term {
    fn judge(&self, labels: &BTreeMap<String, String>) -> Judged {
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            // An empty term matches no node.
            return Judged::No;
        }
        let mut verdict = if self.match_fields.is_empty() {
            Judged::Yes
        } else {
            Judged::Unknown
        };
        for requirement in &self.match_expressions {
            match requirement.judge(labels) {
                Judged::No => return Judged::No,
                Judged::Unknown => verdict = Judged::Unknown,
                Judged::Yes => {}
            }
        }
        verdict
    }
}

/// The scheduling rules of one VM template that admission judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementRules {
    /// `spec.nodeSelector`, with `kubevirt.io/schedulable: "true"` added as KubeVirt does.
    pub node_selector: BTreeMap<String, String>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// The required node affinity's terms; `None` without one.
    pub required_terms: Option<Vec<Term>>,
}

/// How one node looks to one VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVerdict {
    /// Why the VM cannot be scheduled there, each reason a phrase; empty when it can.
    pub reasons: Vec<String>,
    /// The required node affinity could not be judged on this node (counted as matching).
    pub unjudged: bool,
}

impl PlacementRules {
    /// Reads the rules from a VMI spec (a VM's `spec.template.spec`); parts that do not parse
    /// are left out, each with a note.
    pub fn from_spec(spec: &Value) -> (PlacementRules, Vec<String>) {
        let mut notes = Vec::new();
        let mut node_selector: BTreeMap<String, String> = match spec.get("nodeSelector") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                notes.push(format!(
                    "the template's nodeSelector could not be read ({e})"
                ));
                BTreeMap::new()
            }),
        };
        node_selector.insert(SCHEDULABLE_LABEL.to_owned(), "true".to_owned());
        let tolerations = match spec.get("tolerations") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                notes.push(format!(
                    "the template's tolerations could not be read ({e})"
                ));
                Vec::new()
            }),
        };
        let required = spec.pointer(
            "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
        );
        let required_terms = match required {
            None | Some(Value::Null) => None,
            Some(v) => match serde_json::from_value::<Vec<Term>>(v.clone()) {
                Ok(terms) => Some(terms),
                Err(e) => {
                    notes.push(format!(
                        "the template's required node affinity could not be read ({e}); it was \
                         not judged"
                    ));
                    None
                }
            },
        };
        (
            PlacementRules {
                node_selector,
                tolerations,
                required_terms,
            },
            notes,
        )
    }

    /// Whether the VM may be scheduled on `node`, and if not, why.
    pub fn judge(&self, node: &NodeDevices) -> NodeVerdict {
        let mut reasons = Vec::new();
        if node.unschedulable {
            reasons.push("cordoned (spec.unschedulable)".to_owned());
        }
        for taint in node.taints.iter().filter(|t| t.repels()) {
            if !self.tolerations.iter().any(|t| t.tolerates(taint)) {
                reasons.push(format!("taint {} not tolerated", taint.describe()));
            }
        }
        for (key, want) in &self.node_selector {
            let have = node.labels.get(key);
            if have == Some(want) {
                continue;
            }
            if key == SCHEDULABLE_LABEL {
                reasons.push(format!(
                    "not {SCHEDULABLE_LABEL}=true (virt-handler does not run there, or marks \
                     it unschedulable)"
                ));
            } else {
                reasons.push(match have {
                    Some(have) => {
                        format!("nodeSelector {key}={want} does not match ({key}={have})")
                    }
                    None => format!("nodeSelector {key}={want} does not match (no {key} label)"),
                });
            }
        }
        let mut unjudged = false;
        if let Some(terms) = &self.required_terms {
            let verdicts: Vec<Judged> = terms.iter().map(|t| t.judge(&node.labels)).collect();
            let matched = verdicts.contains(&Judged::Yes);
            if !matched && verdicts.contains(&Judged::Unknown) {
                unjudged = true;
            } else if !matched {
                reasons.push("required node affinity matches none of its terms".to_owned());
            }
        }
        NodeVerdict { reasons, unjudged }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(labels: Value, taints: Value, unschedulable: bool) -> NodeDevices {
        NodeDevices {
            name: "n".into(),
            labels: serde_json::from_value(labels).unwrap(),
            taints: serde_json::from_value(taints).unwrap(),
            unschedulable,
            ..Default::default()
        }
    }

    fn rules(spec: Value) -> PlacementRules {
        let (rules, notes) = PlacementRules::from_spec(&spec);
        assert!(notes.is_empty(), "{notes:?}");
        rules
    }

    #[test]
    fn kubevirt_schedulable_is_required_and_cordons_exclude() {
        let plain = rules(json!({}));
        let ok = node(json!({ SCHEDULABLE_LABEL: "true" }), json!([]), false);
        assert_eq!(plain.judge(&ok).reasons, Vec::<String>::new());
        let no_handler = node(json!({}), json!([]), false);
        assert!(plain.judge(&no_handler).reasons[0].contains("virt-handler"));
        let cordoned = node(json!({ SCHEDULABLE_LABEL: "true" }), json!([]), true);
        assert_eq!(
            plain.judge(&cordoned).reasons,
            ["cordoned (spec.unschedulable)"]
        );
    }

    #[test]
    fn taints_repel_unless_tolerated() {
        let tainted = node(
            json!({ SCHEDULABLE_LABEL: "true" }),
            json!([{ "key": "gpu", "value": "reserved", "effect": "NoSchedule" },
                   { "key": "soft", "effect": "PreferNoSchedule" }]),
            false,
        );
        assert_eq!(
            rules(json!({})).judge(&tainted).reasons,
            ["taint gpu=reserved:NoSchedule not tolerated"]
        );
        for tolerations in [
            json!([{ "key": "gpu", "operator": "Equal", "value": "reserved", "effect": "NoSchedule" }]),
            json!([{ "key": "gpu", "value": "reserved" }]),
            json!([{ "key": "gpu", "operator": "Exists" }]),
            json!([{ "operator": "Exists" }]),
        ] {
            let r = rules(json!({ "tolerations": tolerations }));
            assert!(r.judge(&tainted).reasons.is_empty(), "{tolerations}");
        }
        for tolerations in [
            json!([{ "key": "gpu", "value": "other" }]),
            json!([{ "key": "gpu", "operator": "Exists", "effect": "NoExecute" }]),
            json!([{ "key": "other", "operator": "Exists" }]),
        ] {
            let r = rules(json!({ "tolerations": tolerations }));
            assert_eq!(r.judge(&tainted).reasons.len(), 1, "{tolerations}");
        }
    }

    #[test]
    fn node_selector_and_required_affinity_are_label_matches() {
        let a100 = node(
            json!({ SCHEDULABLE_LABEL: "true", "gpu": "a100", "zone": "z1" }),
            json!([]),
            false,
        );
        let t4 = node(
            json!({ SCHEDULABLE_LABEL: "true", "gpu": "t4" }),
            json!([]),
            false,
        );
        let by_selector = rules(json!({ "nodeSelector": { "gpu": "a100" } }));
        assert!(by_selector.judge(&a100).reasons.is_empty());
        assert_eq!(
            by_selector.judge(&t4).reasons,
            ["nodeSelector gpu=a100 does not match (gpu=t4)"]
        );

        let affinity = |terms: Value| {
            rules(json!({ "affinity": { "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": terms } } } }))
        };
        let either = affinity(json!([
            { "matchExpressions": [{ "key": "gpu", "operator": "In", "values": ["a100", "h100"] },
                                   { "key": "zone", "operator": "Exists" }] },
            { "matchExpressions": [{ "key": "gpu", "operator": "DoesNotExist" }] },
        ]));
        assert!(either.judge(&a100).reasons.is_empty());
        assert_eq!(
            either.judge(&t4).reasons,
            ["required node affinity matches none of its terms"]
        );
        let not_t4 = affinity(
            json!([{ "matchExpressions": [{ "key": "gpu", "operator": "NotIn", "values": ["t4"] }] }]),
        );
        assert!(not_t4.judge(&a100).reasons.is_empty());
        assert!(!not_t4.judge(&t4).reasons.is_empty());

        let numeric = affinity(
            json!([{ "matchExpressions": [{ "key": "cores", "operator": "Gt", "values": ["8"] }] }]),
        );
        let verdict = numeric.judge(&t4);
        assert!(
            verdict.reasons.is_empty() && verdict.unjudged,
            "{verdict:?}"
        );
        let fields = affinity(json!([{ "matchFields": [
            { "key": "metadata.name", "operator": "In", "values": ["x"] }] }]));
        assert!(fields.judge(&t4).unjudged);
        assert!(
            !affinity(json!([])).judge(&t4).reasons.is_empty(),
            "no terms: no node"
        );
    }
}
