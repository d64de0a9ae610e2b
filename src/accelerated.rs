//! Accelerated EC2 instance types: what their nodes offer the scheduler and
//! the quota (EC2's `GpuInfo` / `NeuronInfo` of DescribeInstanceTypes), and
//! what a group of them gets — the taint that keeps other work off them
//! and the label that names the GPU product.
//!
//! ```text
//! instance group (machineType p4d.24xlarge)
//!     │ of_instance_type: 8 × nvidia.com/gpu, A100
//!     ├─► render::node_labels  nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB
//!     ├─► InstanceGroup::taints nvidia.com/gpu=present:NoSchedule (spec)
//!     ├─► sim nodes            allocatable nvidia.com/gpu: 8
//!     ├─► addons               NVIDIA's device plugin (only where such groups exist)
//!     └─► validate             an image with its driver stack (Kind: nvidia, neuron)
//! ```
//!
//! [`SHAPES`] are the accelerated types capacity requirements choose from
//! (`capacity::matching` with `accelerators`): vCPUs, memory, devices and
//! each device's memory, as DescribeInstanceTypes gives them.

/// The resource name of NVIDIA's device plugin.
pub const GPU: &str = "nvidia.com/gpu";
/// The resource name of AWS's Neuron device plugin (Trainium, Inferentia).
pub const NEURON: &str = "aws.amazon.com/neuron";
/// The node label that names a node's GPU product: the one NVIDIA's GPU
/// feature discovery sets (`NVIDIA-A100-SXM4-40GB`), and pinfleet's GPU
/// instance groups set to the same values from their instance type.
pub const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

/// An accelerator flavor the quota counts: a GPU product, or Neuron
/// devices (as Kueue's ResourceFlavors split one resource by node labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Flavor {
    GpuA100,
    GpuH100,
    GpuA10g,
    GpuL4,
    Neuron,
}

pub const FLAVORS: [Flavor; 5] = [Flavor::GpuA100, Flavor::GpuH100, Flavor::GpuA10g, Flavor::GpuL4, Flavor::Neuron];

impl Flavor {
    /// The short name people say (`A100`, `neuron`).
    pub fn short(self) -> &'static str {
        match self {
            Flavor::GpuA100 => "A100",
            Flavor::GpuH100 => "H100",
            Flavor::GpuA10g => "A10G",
            Flavor::GpuL4 => "L4",
            Flavor::Neuron => "neuron",
        }
    }

    /// The GPU product a short name names (`A100`, any case).
    pub fn product(short: &str) -> Option<Flavor> {
        FLAVORS.into_iter().find(|f| *f != Flavor::Neuron && f.short().eq_ignore_ascii_case(short))
    }

    /// The values of [`PRODUCT_LABEL`] that mean this product: GPU feature
    /// discovery's names of the products on EC2's instance types.
    pub fn product_labels(self) -> &'static [&'static str] {
        match self {
            Flavor::GpuA100 => &["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"],
            Flavor::GpuH100 => &["NVIDIA-H100-80GB-HBM3"],
            Flavor::GpuA10g => &["NVIDIA-A10G"],
            Flavor::GpuL4 => &["NVIDIA-L4"],
            Flavor::Neuron => &[],
        }
    }

    /// The product a value of [`PRODUCT_LABEL`] names, by its words
    /// (`NVIDIA-A100-SXM4-80GB` is an A100; `NVIDIA-L40S` is not an L4).
    pub fn of_label(value: &str) -> Option<Flavor> {
        value.split(['-', '_', ' ']).find_map(Flavor::product)
    }

    /// The product whose nodes carry exactly this value of
    /// [`PRODUCT_LABEL`] (one of [`Flavor::product_labels`]). A value no
    /// node carries names none, however like one it reads: a node
    /// selector matches a label byte for byte, so `A100` or
    /// `nvidia-a100-sxm4-40gb` lands on no node.
    pub fn labelled(value: &str) -> Option<Flavor> {
        FLAVORS.into_iter().find(|f| f.product_labels().contains(&value))
    }

    /// Every value of [`PRODUCT_LABEL`] nodes carry, with its product, for
    /// a refusal to name: `NVIDIA-A100-SXM4-40GB (A100), …`.
    pub fn known_labels() -> String {
        FLAVORS
            .into_iter()
            .flat_map(|f| f.product_labels().iter().map(move |l| format!("{l} ({})", f.short())))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Its place in [`FLAVORS`] (and in a count kept per flavor).
    pub(crate) fn index(self) -> usize {
        match self {
            Flavor::GpuA100 => 0,
            Flavor::GpuH100 => 1,
            Flavor::GpuA10g => 2,
            Flavor::GpuL4 => 3,
            Flavor::Neuron => 4,
        }
    }
}

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

/// An accelerator product, as capacity requirements name it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub enum Product {
    A10G,
    L4,
    A100,
    H100,
    Trainium,
    Inferentia2,
}

impl Product {
    pub const ALL: [Product; 6] =
        [Product::A10G, Product::L4, Product::A100, Product::H100, Product::Trainium, Product::Inferentia2];

    pub fn as_str(self) -> &'static str {
        match self {
            Product::A10G => "A10G",
            Product::L4 => "L4",
            Product::A100 => "A100",
            Product::H100 => "H100",
            Product::Trainium => "Trainium",
            Product::Inferentia2 => "Inferentia2",
        }
    }

    /// The driver stack an image needs for it.
    pub fn kind(self) -> Kind {
        match self {
            Product::Trainium | Product::Inferentia2 => Kind::Neuron,
            _ => Kind::Nvidia,
        }
    }
}

/// The driver stack an accelerated image carries, as EKS's accelerated
/// AMIs come in two: NVIDIA (driver and nvidia-container-toolkit) and
/// Neuron (aws-neuronx driver and runtime).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Nvidia,
    Neuron,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Nvidia => "nvidia",
            Kind::Neuron => "neuron",
        }
    }
}

impl Accelerated {
    /// The driver stack its machines' image must carry.
    pub fn kind(&self) -> Kind {
        if self.flavor == Flavor::Neuron {
            Kind::Neuron
        } else {
            Kind::Nvidia
        }
    }
}

/// One accelerated instance type as EC2's DescribeInstanceTypes gives it:
/// vCPUs, memory, its accelerators and each one's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub instance_type: &'static str,
    pub vcpu: u32,
    pub memory_gib: u32,
    pub count: u32,
    pub product: Product,
    /// Memory of one accelerator, in MiB, exactly as EC2 lists it
    /// (`GpuInfo.Gpus[].MemoryInfo.SizeInMiB`, `NeuronInfo…SizeInMiB`): an
    /// A10G or L4 has 22,888 MiB (22.35 GiB), not "24 GB".
    pub device_memory_mib: u32,
}

/// The GPU product label of each accelerated type EC2 lists, as shell
/// `case` arms setting `GPU_PRODUCT` (a machine's user-data labels its node
/// by the type it was launched as, read from its metadata).
pub fn product_case_arms() -> String {
    SHAPES
        .iter()
        .filter_map(|s| {
            let label = of_instance_type(s.instance_type)?.product_label?;
            Some(format!("  {}) GPU_PRODUCT='{label}' ;;\n", s.instance_type))
        })
        .collect()
}

const fn shape(t: &'static str, vcpu: u32, mem: u32, count: u32, product: Product, dev: u32) -> Shape {
    Shape { instance_type: t, vcpu, memory_gib: mem, count, product, device_memory_mib: dev }
}

impl Shape {
    /// Whether one device's memory is within `gib` (whole GiB, as a
    /// group's `deviceMemoryGib` asks): compared in MiB, as EC2 counts.
    pub fn device_memory_within(&self, min_gib: u32, max_gib: Option<u32>) -> bool {
        let mib = u64::from(self.device_memory_mib);
        u64::from(min_gib) * 1024 <= mib && max_gib.is_none_or(|m| mib <= u64::from(m) * 1024)
    }
}

/// The accelerated types capacity requirements choose from (all x86_64),
/// smallest first within each family, the families in the order
/// [`Product::ALL`] names their products.
pub const SHAPES: &[Shape] = &[
    shape("g5.xlarge", 4, 16, 1, Product::A10G, 22_888),
    shape("g5.2xlarge", 8, 32, 1, Product::A10G, 22_888),
    shape("g5.4xlarge", 16, 64, 1, Product::A10G, 22_888),
    shape("g5.8xlarge", 32, 128, 1, Product::A10G, 22_888),
    shape("g5.16xlarge", 64, 256, 1, Product::A10G, 22_888),
    shape("g5.12xlarge", 48, 192, 4, Product::A10G, 22_888),
    shape("g5.24xlarge", 96, 384, 4, Product::A10G, 22_888),
    shape("g5.48xlarge", 192, 768, 8, Product::A10G, 22_888),
    shape("g6.xlarge", 4, 16, 1, Product::L4, 22_888),
    shape("g6.2xlarge", 8, 32, 1, Product::L4, 22_888),
    shape("g6.4xlarge", 16, 64, 1, Product::L4, 22_888),
    shape("g6.8xlarge", 32, 128, 1, Product::L4, 22_888),
    shape("g6.16xlarge", 64, 256, 1, Product::L4, 22_888),
    shape("g6.12xlarge", 48, 192, 4, Product::L4, 22_888),
    shape("g6.24xlarge", 96, 384, 4, Product::L4, 22_888),
    shape("g6.48xlarge", 192, 768, 8, Product::L4, 22_888),
    shape("p4d.24xlarge", 96, 1152, 8, Product::A100, 40_960),
    shape("p4de.24xlarge", 96, 1152, 8, Product::A100, 81_920),
    shape("p5.48xlarge", 192, 2048, 8, Product::H100, 81_920),
    shape("trn1.2xlarge", 8, 32, 1, Product::Trainium, 32_768),
    shape("trn1.32xlarge", 128, 512, 16, Product::Trainium, 32_768),
    shape("trn1n.32xlarge", 128, 512, 16, Product::Trainium, 32_768),
    shape("inf2.xlarge", 4, 16, 1, Product::Inferentia2, 32_768),
    shape("inf2.8xlarge", 32, 128, 1, Product::Inferentia2, 32_768),
    shape("inf2.24xlarge", 96, 384, 6, Product::Inferentia2, 32_768),
    shape("inf2.48xlarge", 192, 768, 12, Product::Inferentia2, 32_768),
];

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
        assert_eq!(of_instance_type("inf2.xlarge").unwrap().kind(), Kind::Neuron);
        // Exactly the values nodes carry: no alias, no other case.
        assert_eq!(Flavor::labelled("NVIDIA-A100-SXM4-80GB"), Some(Flavor::GpuA100));
        for alias in ["A100", "nvidia-a100-sxm4-40gb", "NVIDIA-A100", "NVIDIA-L40S", ""] {
            assert_eq!(Flavor::labelled(alias), None, "{alias}");
        }
        assert!(Flavor::known_labels().starts_with("NVIDIA-A100-SXM4-40GB (A100), NVIDIA-A100-SXM4-80GB (A100), "));
        assert_eq!(of_instance_type("g6.xlarge").unwrap().kind(), Kind::Nvidia);
    }

    #[test]
    fn shapes_agree_with_what_nodes_offer() {
        // Every shape requirements may pick is a type whose nodes offer
        // that many devices of that driver stack.
        for s in SHAPES {
            let a = of_instance_type(s.instance_type).unwrap_or_else(|| panic!("{}", s.instance_type));
            assert_eq!((a.count, a.kind()), (s.count, s.product.kind()), "{}", s.instance_type);
            assert_eq!(crate::capacity::known_type(s.instance_type), Ok(()));
        }
    }
}
