//! Accelerated EC2 instance types: what their nodes offer the scheduler and
//! the quota (EC2's `GpuInfo` / `NeuronInfo` of DescribeInstanceTypes), and
//! what a group of them gets — the taint that keeps other work off them
//! and the label that names the GPU product.
//!
//! ```text
//! instance group (machineType p4d.24xlarge)
//!     │ of_instance_type: 8 × nvidia.com/gpu, A100
//!     ├─► render::node_labels  nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB
//!     ├─► group_taints         nvidia.com/gpu=present:NoSchedule
//!     ├─► sim nodes            allocatable nvidia.com/gpu: 8
//!     └─► addons               NVIDIA's device plugin (only where such groups exist)
//! ```

use crate::spec::{InstanceGroup, Taint, TaintEffect};
use crate::workloads::demand::{Flavor, GPU, NEURON};

/// What one accelerated machine offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accelerated {
    /// The device plugin's resource name (`nvidia.com/gpu`).
    pub resource: &'static str,
    pub count: u32,
    pub flavor: Flavor,
    /// The node label's value (GPU feature discovery's name of the product);
    /// none for Neuron devices.
    pub product_label: Option<&'static str>,
}

/// The accelerators of an EC2 instance type (the families pinfleet knows:
/// g5 A10G, g6 L4, p4d/p4de A100, p5 H100, trn1/trn1n Trainium, inf2
/// Inferentia2), as EC2's DescribeInstanceTypes gives them.
pub fn of_instance_type(machine_type: &str) -> Option<Accelerated> {
    let (family, size) = machine_type.split_once('.')?;
    let gpu = |count: u32, flavor: Flavor, label: &'static str| Accelerated {
        resource: GPU,
        count,
        flavor,
        product_label: Some(label),
    };
    let neuron = |count: u32| Accelerated { resource: NEURON, count, flavor: Flavor::Neuron, product_label: None };
    Some(match (family, size) {
        ("g5", "12xlarge" | "24xlarge") => gpu(4, Flavor::GpuA10g, "NVIDIA-A10G"),
        ("g5", "48xlarge") => gpu(8, Flavor::GpuA10g, "NVIDIA-A10G"),
        ("g5", _) => gpu(1, Flavor::GpuA10g, "NVIDIA-A10G"),
        ("g6", "12xlarge" | "24xlarge") => gpu(4, Flavor::GpuL4, "NVIDIA-L4"),
        ("g6", "48xlarge") => gpu(8, Flavor::GpuL4, "NVIDIA-L4"),
        ("g6", _) => gpu(1, Flavor::GpuL4, "NVIDIA-L4"),
        ("p4d", "24xlarge") => gpu(8, Flavor::GpuA100, "NVIDIA-A100-SXM4-40GB"),
        ("p4de", "24xlarge") => gpu(8, Flavor::GpuA100, "NVIDIA-A100-SXM4-80GB"),
        ("p5", "48xlarge") => gpu(8, Flavor::GpuH100, "NVIDIA-H100-80GB-HBM3"),
        ("trn1", "2xlarge") => neuron(1),
        ("trn1" | "trn1n", "32xlarge") => neuron(16),
        ("inf2", "xlarge" | "8xlarge") => neuron(1),
        ("inf2", "24xlarge") => neuron(6),
        ("inf2", "48xlarge") => neuron(12),
        _ => return None,
    })
}

/// A group's taints: its own, and for accelerated machines the device's
/// `RESOURCE=present:NoSchedule` (unless the group already taints that
/// key), so only pods that ask for the device (and tolerate it, as the
/// platform's render and the ExtendedResourceToleration plugin make them)
/// land there.
pub fn group_taints(group: &InstanceGroup) -> Vec<Taint> {
    let mut taints = group.taints.clone();
    if let Some(a) = of_instance_type(&group.machine_type) {
        if !taints.iter().any(|t| t.key == a.resource) {
            taints.push(Taint { key: a.resource.into(), value: "present".into(), effect: TaintEffect::NoSchedule });
        }
    }
    taints
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_types_offer_what_ec2_says() {
        let a = of_instance_type("p4d.24xlarge").unwrap();
        assert_eq!((a.resource, a.count, a.flavor), (GPU, 8, Flavor::GpuA100));
        assert_eq!(Flavor::of_label(a.product_label.unwrap()), Some(Flavor::GpuA100));
        assert_eq!(of_instance_type("g5.2xlarge").unwrap().count, 1);
        assert_eq!(of_instance_type("g5.48xlarge").unwrap().count, 8);
        assert_eq!(
            of_instance_type("trn1.32xlarge").unwrap(),
            Accelerated { resource: NEURON, count: 16, flavor: Flavor::Neuron, product_label: None }
        );
        assert_eq!(of_instance_type("m5.large"), None);
        assert_eq!(of_instance_type("p4d"), None);
        for t in ["g5.xlarge", "g6.xlarge", "p4de.24xlarge", "p5.48xlarge"] {
            let a = of_instance_type(t).unwrap();
            assert_eq!(Flavor::of_label(a.product_label.unwrap()), Some(a.flavor), "{t}");
        }
    }
}
