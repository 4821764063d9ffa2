//! What the KubeVirt CR permits (`spec.configuration.permittedHostDevices`), and so how
//! KubeVirt hands each device resource out ([`DeviceClass`]).

use serde_json::Value;

use super::shapes::KubeVirtObject;
use crate::capacity::{DeviceClass, PermittedDevice};

/// What the KubeVirt CR says about device permits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permits {
    /// The permitted resources (`permittedHostDevices` is set; it may list none).
    Listed(Vec<PermittedDevice>),
    /// `permittedHostDevices` is not set: KubeVirt checks no permit (a resource then comes
    /// from a device plugin outside KubeVirt, if from anywhere).
    Unchecked,
    /// No KubeVirt CR exists.
    Missing,
    /// The KubeVirt CR could not be read: why.
    Unknown(String),
}

impl Permits {
    /// Reads the permits of the first KubeVirt CR (a cluster has one).
    pub fn from_crs(crs: &[KubeVirtObject]) -> Permits {
        let Some(cr) = crs.first() else {
            return Permits::Missing;
        };
        let Some(permitted) = &cr.spec.configuration.permitted_host_devices else {
            return Permits::Unchecked;
        };
        let mut listed = Vec::new();
        let lists = [
            (&permitted.pci_host_devices, DeviceClass::PciPassthrough),
            (&permitted.mediated_devices, DeviceClass::Mediated),
            (&permitted.usb, DeviceClass::Usb),
        ];
        for (entries, class) in lists {
            for entry in entries.iter().filter(|e| !e.resource_name.is_empty()) {
                let selector = match class {
                    DeviceClass::PciPassthrough => Some(entry.pci_vendor_selector.clone()),
                    DeviceClass::Mediated => Some(entry.mdev_name_selector.clone()),
                    _ => (!entry.selectors.is_empty())
                        .then(|| Value::Array(entry.selectors.clone()).to_string()),
                }
                .filter(|s| !s.is_empty());
                listed.push(PermittedDevice {
                    resource: entry.resource_name.clone(),
                    class: if entry.external_resource_provider {
                        DeviceClass::External
                    } else {
                        class
                    },
                    selector,
                });
            }
        }
        Permits::Listed(listed)
    }

    /// How KubeVirt hands `resource` out: the class of its permit (an external provider wins
    /// when several entries name it); `NotPermitted` when the list does not name it or there
    /// is no KubeVirt CR; `External` when permits are not checked; `Unknown` when unreadable.
    pub fn class_of(&self, resource: &str) -> DeviceClass {
        match self {
            Permits::Listed(listed) => listed
                .iter()
                .filter(|p| p.resource == resource)
                .map(|p| p.class)
                .min_by_key(|class| (*class != DeviceClass::External, *class))
                .unwrap_or(DeviceClass::NotPermitted),
            Permits::Unchecked => DeviceClass::External,
            Permits::Missing => DeviceClass::NotPermitted,
            Permits::Unknown(_) => DeviceClass::Unknown,
        }
    }

    /// The permitted resources (empty unless [`Permits::Listed`]).
    pub fn listed(&self) -> &[PermittedDevice] {
        match self {
            Permits::Listed(listed) => listed,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kubevirt(permitted: Value) -> Vec<KubeVirtObject> {
        vec![
            serde_json::from_value(json!({
                "metadata": { "name": "kubevirt", "namespace": "kubevirt" },
                "spec": { "configuration": { "permittedHostDevices": permitted } }
            }))
            .unwrap(),
        ]
    }

    #[test]
    fn permits_classify_each_resource() {
        let permits = Permits::from_crs(&kubevirt(json!({
            "pciHostDevices": [
                { "pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/T4" },
                { "pciVendorSelector": "10DE:2236", "resourceName": "nvidia.com/A10",
                  "externalResourceProvider": true },
            ],
            "mediatedDevices": [{ "mdevNameSelector": "GRID T4-1Q", "resourceName": "nvidia.com/GRID_T4-1Q" }],
            "usb": [{ "resourceName": "kubevirt.io/storage", "selectors": [{ "vendor": "46f4", "product": "0001" }] }],
        })));
        assert_eq!(
            permits.class_of("nvidia.com/T4"),
            DeviceClass::PciPassthrough
        );
        assert_eq!(permits.class_of("nvidia.com/A10"), DeviceClass::External);
        assert_eq!(
            permits.class_of("nvidia.com/GRID_T4-1Q"),
            DeviceClass::Mediated
        );
        assert_eq!(permits.class_of("kubevirt.io/storage"), DeviceClass::Usb);
        assert_eq!(
            permits.class_of("nvidia.com/V100"),
            DeviceClass::NotPermitted
        );
        assert_eq!(
            permits.listed()[0].selector.as_deref(),
            Some("10DE:1EB8"),
            "{permits:?}"
        );

        let unset: Vec<KubeVirtObject> =
            vec![serde_json::from_value(json!({ "spec": { "configuration": {} } })).unwrap()];
        assert_eq!(
            Permits::from_crs(&unset).class_of("x.com/y"),
            DeviceClass::External
        );
        assert_eq!(
            Permits::from_crs(&[]).class_of("x.com/y"),
            DeviceClass::NotPermitted
        );
        assert_eq!(
            Permits::Unknown("forbidden".into()).class_of("x.com/y"),
            DeviceClass::Unknown
        );
    }
}
