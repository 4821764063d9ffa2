//! How a capacity plan reads: the per-node table, the verdict, and the refusals of pool create
//! and of a start, each one sentence naming the objects and the fix; and the words the views
//! carry ([`plan_words`], [`holders_text`], [`node_condition`], [`cluster_empty`], …), so that
//! the CLI and the app say the same thing and the app composes no sentence of its own.

use std::fmt::Write as _;

use super::view::{
    CapacityPlan, ClusterCapacity, DeviceHolder, DeviceNeed, NodeCapacity, NodePlan, PlanWords,
};
use crate::error::{Error, ErrorKind};

/// What every capacity answer says about itself (SPEC: "Admission is a check, not a
/// reservation: say so").
pub const NOT_A_RESERVATION: &str = "admission is a check, not a reservation: nothing is held \
     for the pool, and devices free now may be taken by other VMs before its members start";

/// Where to see who holds the devices, in a fix: both front ends show it.
const WHO_HOLDS: &str = "the app's Capacity view or corral-vdi capacity shows who holds them";

/// Nodes named in a one-line refusal, at most; the rest are counted.
const NODES_IN_A_SENTENCE: usize = 8;

/// `1 nvidia.com/T4`, or `1 nvidia.com/T4 and 2 intel.com/nic`.
pub fn needs_text(needs: &[DeviceNeed]) -> String {
    if needs.is_empty() {
        return "no device".to_owned();
    }
    let parts: Vec<String> = needs
        .iter()
        .map(|n| format!("{} {}", n.per_vm, n.resource))
        .collect();
    and_list(&parts)
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(parts: &[String]) -> String {
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "  {}", line.join("  ").trim_end());
    }
    out
}

/// Above this many nodes, those that report none of the resources are counted, not listed.
const NODES_IN_A_TABLE: usize = 20;

/// The per-node table of a plan, one row per node and resource (columns NODE, RESOURCE, CLASS,
/// ALLOCATABLE, HELD, FREE, NEEDED — what the whole request needs — and FITS — whole VMs the
/// node can hold, `-` where the VM may not be scheduled), then one line per excluded node with
/// its reason. In a cluster of more than 20 nodes, nodes that report none of the resources and
/// hold none are summed up in one line. Lines are indented by two spaces and end with a
/// newline; empty without devices.
pub fn plan_table(plan: &CapacityPlan) -> String {
    if plan.needs.is_empty() {
        return String::new();
    }
    let bare = |n: &&NodePlan| {
        n.rows
            .iter()
            .all(|r| r.capacity.is_none() && r.allocatable == 0 && r.held == 0)
    };
    let (shown, hidden): (Vec<&NodePlan>, Vec<&NodePlan>) = if plan.nodes.len() > NODES_IN_A_TABLE {
        plan.nodes.iter().partition(|n| !bare(n))
    } else {
        (plan.nodes.iter().collect(), Vec::new())
    };
    let mut rows = vec![
        [
            "NODE",
            "RESOURCE",
            "CLASS",
            "ALLOCATABLE",
            "HELD",
            "FREE",
            "NEEDED",
            "FITS",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for node in &shown {
        for row in &node.rows {
            rows.push(vec![
                node.node.clone(),
                row.resource.clone(),
                row.class.label().to_owned(),
                row.allocatable.to_string(),
                row.held.to_string(),
                row.free.to_string(),
                row.needed.to_string(),
                if node.excluded.is_some() {
                    "-".to_owned()
                } else {
                    node.fits.to_string()
                },
            ]);
        }
    }
    let mut out = aligned(&rows);
    if !hidden.is_empty() {
        let names: Vec<&str> = plan.needs.iter().map(|n| n.resource.as_str()).collect();
        let _ = writeln!(
            out,
            "  and {} more node{} without {}",
            hidden.len(),
            if hidden.len() == 1 { "" } else { "s" },
            names.join(" or ")
        );
    }
    for node in &shown {
        if let Some(why) = &node.excluded {
            let _ = writeln!(out, "  {}: not schedulable for this VM: {why}", node.node);
        }
    }
    out
}

/// Where the plan puts the VMs: `node-a 3, node-b 1`.
fn fits_list(nodes: &[NodePlan]) -> String {
    let mut fitting: Vec<&NodePlan> = nodes.iter().filter(|n| n.fits > 0).collect();
    fitting.sort_by(|a, b| b.fits.cmp(&a.fits).then_with(|| a.node.cmp(&b.node)));
    let shown: Vec<String> = fitting
        .iter()
        .take(NODES_IN_A_SENTENCE)
        .map(|n| format!("{} {}", n.node, n.fits))
        .collect();
    let mut text = shown.join(", ");
    if fitting.len() > NODES_IN_A_SENTENCE {
        let _ = write!(
            text,
            " and {} more nodes",
            fitting.len() - NODES_IN_A_SENTENCE
        );
    }
    text
}

/// Whether the request fits, in one sentence: `all 3 fit (room for 3 such VMs now)`, `fits 3
/// of the 4 you ask for`, or why none can start. Shown through [`plan_words`].
fn verdict(plan: &CapacityPlan) -> String {
    if plan.needs.is_empty() {
        return format!(
            "VM \"{}\" asks for no GPU or host device: nothing to admit",
            plan.vm
        );
    }
    if !plan.not_permitted.is_empty() {
        return format!(
            "none can start: the KubeVirt CR does not permit {}",
            plan.not_permitted.join(", ")
        );
    }
    let room = if plan.placeable == 0 {
        "no node has room for one now".to_owned()
    } else {
        format!(
            "room for {} such VM{} now: {}",
            plan.placeable,
            if plan.placeable == 1 { "" } else { "s" },
            fits_list(&plan.nodes)
        )
    };
    if plan.admitted {
        format!("fits: all {} you ask for can be placed ({room})", plan.size)
    } else {
        format!(
            "does not fit: fits {} of the {} you ask for ({room})",
            plan.fits, plan.size
        )
    }
}

/// What each VM of `plan` asks for, with how KubeVirt hands each device out: `each VM needs 1
/// nvidia.com/T4 (PCI passthrough), all on one node`; `VM "gold" asks for no GPU or host
/// device` when it asks for none.
fn needs_sentence(plan: &CapacityPlan) -> String {
    if plan.needs.is_empty() {
        return format!("VM \"{}\" asks for no GPU or host device", plan.vm);
    }
    let parts: Vec<String> = plan
        .needs
        .iter()
        .map(|n| format!("{} {} ({})", n.per_vm, n.resource, n.class.label()))
        .collect();
    format!("each VM needs {}, all on one node", and_list(&parts))
}

/// What to do when `plan` does not fit (the fix of [`pool_refusal`], without the caveat), in
/// words for both front ends (no CLI flag: `make the pool smaller (3 fit now)`); `None` when
/// it is admitted.
fn create_fix(plan: &CapacityPlan) -> Option<String> {
    if plan.admitted {
        return None;
    }
    if !plan.not_permitted.is_empty() {
        return Some(PERMIT_FIX.to_owned());
    }
    let smaller = if plan.placeable > 0 {
        let fit = if plan.placeable == 1 { "fits" } else { "fit" };
        format!("make the pool smaller ({} {fit} now), ", plan.placeable)
    } else {
        String::new()
    };
    Some(format!(
        "{smaller}free devices ({WHO_HOLDS}), or add nodes with the device"
    ))
}

/// The words of `plan` ([`PlanWords`]): what each VM needs, whether it fits, the fix when it
/// does not, and [`NOT_A_RESERVATION`].
pub fn plan_words(plan: &CapacityPlan) -> PlanWords {
    PlanWords {
        needs: needs_sentence(plan),
        verdict: verdict(plan),
        fix: create_fix(plan),
        caveat: NOT_A_RESERVATION.to_owned(),
    }
}

/// The sentence for resources the KubeVirt CR does not permit.
fn not_permitted_text(plan: &CapacityPlan, who: &str) -> String {
    let asked: Vec<String> = plan
        .needs
        .iter()
        .filter(|n| plan.not_permitted.contains(&n.resource))
        .map(|n| format!("{} ({})", n.resource, n.entries.join(", ")))
        .collect();
    format!(
        "{who} asks for {}, which the KubeVirt CR does not permit (its \
         spec.configuration.permittedHostDevices has no pciHostDevices, mediatedDevices or usb \
         entry with that resourceName), so KubeVirt would refuse to start it",
        asked.join(" and ")
    )
}

const PERMIT_FIX: &str = "ask a cluster administrator to permit the device in the KubeVirt CR \
     (kubectl get kubevirt -A finds it; add the resource to \
     spec.configuration.permittedHostDevices), or use a VM without it";

/// The refusal of a pool create whose plan is not admitted ([`Error::Rejected`], kind
/// `Refused`): one sentence naming the pool, what each VM needs and the room there is, then
/// the per-node table (and notes) on the following lines; the fix ends with
/// [`NOT_A_RESERVATION`].
pub fn pool_refusal(plan: &CapacityPlan, pool: &str) -> Error {
    let golden = format!("golden VM \"{}\"", plan.vm);
    let fix = create_fix(plan).unwrap_or_default();
    let (mut message, fix) = if !plan.not_permitted.is_empty() {
        (
            format!(
                "pool \"{pool}\" cannot be created: {}; nothing was created",
                not_permitted_text(plan, &golden)
                    .replace("refuse to start it", "refuse to start every member")
            ),
            fix,
        )
    } else {
        let room = if plan.placeable == 0 {
            "no schedulable node has room for one".to_owned()
        } else {
            format!(
                "the schedulable nodes have room for {} now ({})",
                plan.placeable,
                fits_list(&plan.nodes)
            )
        };
        (
            format!(
                "pool \"{pool}\" cannot be placed: each of its {} VMs needs {} (cloned from \
                 {golden}), every VM needs all of its devices on one node, and {room}; nothing \
                 was created",
                plan.size,
                needs_text(&plan.needs)
            ),
            format!("{fix}; {NOT_A_RESERVATION}"),
        )
    };
    message.push('\n');
    message.push_str(plan_table(plan).trim_end());
    for note in &plan.notes {
        let _ = write!(message, "\n  note: {note}");
    }
    Error::rejected(ErrorKind::Refused, message, fix)
}

/// `node-a 0 of 4 free`, for one resource; `node-a nvidia.com/A 1 of 4 free and
/// intel.com/B 0 of 2 free` for several.
fn node_free_text(node: &NodePlan, several: bool) -> String {
    let parts: Vec<String> = node
        .rows
        .iter()
        .map(|r| {
            if several {
                format!("{} {} of {} free", r.resource, r.free, r.allocatable)
            } else {
                format!("{} of {} free", r.free, r.allocatable)
            }
        })
        .collect();
    let mut text = format!("{} {}", node.node, parts.join(" and "));
    if let Some(why) = &node.excluded {
        let _ = write!(text, " (not schedulable: {why})");
    }
    text
}

/// The refusal of a start ([`Error::Refused`]): no schedulable node can hold `member` with all
/// of its devices now, e.g. `no node has a free nvidia.com/T4 for pool-2: node-a 0 of 4 free,
/// node-b 0 of 0 free`. Nodes that report the resource are named (most allocatable first, at
/// most eight); the others are counted.
pub fn start_refusal(plan: &CapacityPlan, member: &str) -> Error {
    if !plan.not_permitted.is_empty() {
        return Error::Refused {
            message: format!("{}; nothing was claimed", not_permitted_text(plan, member)),
            suggestion: Some(PERMIT_FIX.to_owned()),
        };
    }
    let several = plan.needs.len() > 1;
    let mut reporting: Vec<&NodePlan> = plan
        .nodes
        .iter()
        .filter(|n| {
            n.rows
                .iter()
                .any(|r| r.allocatable > 0 || r.capacity.is_some())
        })
        .collect();
    reporting.sort_by(|a, b| {
        let total = |n: &NodePlan| n.rows.iter().map(|r| u64::from(r.allocatable)).sum::<u64>();
        total(b).cmp(&total(a)).then_with(|| a.node.cmp(&b.node))
    });
    let mut listed: Vec<String> = reporting
        .iter()
        .take(NODES_IN_A_SENTENCE)
        .map(|n| node_free_text(n, several))
        .collect();
    let others = plan.nodes.len() - listed.len();
    if others > 0 {
        listed.push(format!(
            "{others} other node{} {}",
            if others == 1 { "" } else { "s" },
            if reporting.len() > NODES_IN_A_SENTENCE {
                "not listed"
            } else if others == 1 {
                "has none"
            } else {
                "have none"
            }
        ));
    }
    let head = if several {
        format!(
            "no node has room for all of {member}'s devices at once ({})",
            needs_text(&plan.needs)
        )
    } else {
        let need = &plan.needs[0];
        if need.per_vm == 1 {
            format!("no node has a free {} for {member}", need.resource)
        } else {
            format!(
                "no node has {} free {} for {member} (all on one node)",
                need.per_vm, need.resource
            )
        }
    };
    Error::Refused {
        message: format!("{head}: {}; nothing was claimed", listed.join(", ")),
        suggestion: Some(format!(
            "try again once a device is free ({WHO_HOLDS}), or ask a cluster administrator \
             for more nodes with the device; the check is not a reservation: a start may \
             still wait if someone else takes the device first"
        )),
    }
}

/// Who holds a resource, largest first: `ns/desk-1 (pool sec) ×2 [migration target] [from its
/// VMI]`; `nobody` when no one does.
pub fn holders_text(holders: &[DeviceHolder]) -> String {
    if holders.is_empty() {
        return "nobody".to_owned();
    }
    let named: Vec<String> = holders
        .iter()
        .map(|h| {
            let mut who = format!("{}/{}", h.namespace, h.vm);
            if let Some(pool) = &h.pool {
                let _ = write!(who, " (pool {pool})");
            }
            if h.count > 1 {
                let _ = write!(who, " ×{}", h.count);
            }
            if h.migration_target {
                who.push_str(" [migration target]");
            }
            if h.pod.is_none() {
                who.push_str(" [from its VMI]");
            }
            who
        })
        .collect();
    named.join(", ")
}

/// Why nothing new is scheduled on `node`: `cordoned, not kubevirt.io/schedulable, taint
/// gpu=reserved:NoSchedule`; `None` when VMs may be.
pub fn node_condition(node: &NodeCapacity) -> Option<String> {
    let mut flags = Vec::new();
    if node.cordoned {
        flags.push("cordoned".to_owned());
    }
    if !node.kubevirt_schedulable {
        flags.push("not kubevirt.io/schedulable".to_owned());
    }
    flags.extend(node.taints.iter().map(|t| format!("taint {t}")));
    (!flags.is_empty()).then(|| flags.join(", "))
}

/// Why the Capacity view has nothing to show, as a sentence (the app's empty state, the CLI's
/// one line): no nodes, or none with a device resource; `None` when some node has one.
pub fn cluster_empty(nodes: &[NodeCapacity]) -> Option<String> {
    match nodes.len() {
        0 => Some("The cluster reports no nodes.".to_owned()),
        _ if nodes.iter().any(|n| !n.resources.is_empty()) => None,
        1 => Some("The cluster's one node reports no GPU or host device.".to_owned()),
        n => Some(format!(
            "None of the {n} nodes reports a GPU or host device."
        )),
    }
}

/// The nodes without any device resource, each with its [`node_condition`]: `without
/// devices: n1, n2 (cordoned)`; `None` when there are none.
pub fn without_devices(nodes: &[NodeCapacity]) -> Option<String> {
    let bare: Vec<String> = nodes
        .iter()
        .filter(|n| n.resources.is_empty())
        .map(|n| match &n.condition {
            None => n.node.clone(),
            Some(condition) => format!("{} ({condition})", n.node),
        })
        .collect();
    (!bare.is_empty()).then(|| format!("without devices: {}", bare.join(", ")))
}

/// A resource's total in words: `3 free of 6 on 2 nodes`.
pub fn total_text(free: u32, allocatable: u32, nodes: u32) -> String {
    format!(
        "{free} free of {allocatable} on {nodes} node{}",
        if nodes == 1 { "" } else { "s" }
    )
}

/// The cluster view as a table: one row per node and device resource (NODE, RESOURCE, CLASS,
/// ALLOCATABLE, HELD, FREE, HELD-BY), nodes without devices on one line each, then notes.
pub fn cluster_table(view: &ClusterCapacity) -> String {
    let mut rows = vec![
        [
            "NODE",
            "RESOURCE",
            "CLASS",
            "ALLOCATABLE",
            "HELD",
            "FREE",
            "HELD-BY",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for node in &view.nodes {
        let name = match &node.condition {
            None => node.node.clone(),
            Some(condition) => format!("{} ({condition})", node.node),
        };
        for resource in &node.resources {
            rows.push(vec![
                name.clone(),
                resource.resource.clone(),
                resource.class.label().to_owned(),
                resource.allocatable.to_string(),
                resource.held.to_string(),
                resource.free.to_string(),
                if resource.holders.is_empty() {
                    "-".to_owned()
                } else {
                    resource.holders_text.clone()
                },
            ]);
        }
    }
    let mut out = match &view.empty {
        Some(empty) => format!("  {empty}\n"),
        None => aligned(&rows),
    };
    if let Some(bare) = &view.without_devices {
        let _ = writeln!(out, "  {bare}");
    }
    for note in &view.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    out
}

#[cfg(test)]
mod tests;
