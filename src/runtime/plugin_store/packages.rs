//! The plugins the store installs: each a pinned plugin wheel and, for
//! the CUDA plugins, the pinned NVIDIA wheels of the CUDA libraries it
//! loads. The pins are `third_party/*.sha256` files compiled in (their
//! `#` lines say why these versions; `scripts/pin-wheels.py` writes the
//! rest).

use crate::error::{Error, Result};

/// A plugin published as pinned Python wheels.
#[derive(Debug)]
pub(crate) struct Package {
    /// The plugin's distribution as pip spells it (`xla-cpu-pjrt`).
    pub(crate) distribution: &'static str,
    /// The pinned version.
    pub(crate) version: &'static str,
    /// The plugin library's path inside the entry.
    pub(crate) plugin_in_wheel: &'static str,
    /// `sha256  file name` lines of the plugin's wheels, one per platform.
    pub(crate) pins: &'static str,
    /// The same for the wheels of the libraries the plugin loads (empty
    /// for the CPU plugin), unpacked into the plugin's entry.
    pub(crate) runtime: &'static str,
    /// Libraries in the entry to load before the plugin, for those the
    /// plugin opens by name but whose folder its library path lacks.
    pub(crate) preload: &'static [&'static str],
    /// The file looked for beside the running executable.
    pub(crate) beside_executable: &'static str,
    /// The variable that names a plugin file instead.
    pub(crate) env_var: &'static str,
    /// The command that fetches this package, and the library calls.
    pub(crate) fetch_command: &'static str,
    pub(crate) fetch_call: &'static str,
    pub(crate) install_call: &'static str,
    /// What the plugin is, for messages.
    pub(crate) what: &'static str,
}

/// The pinned XLA CPU plugin.
pub(crate) const CPU: Package = Package {
    distribution: "xla-cpu-pjrt",
    version: "0.0.1",
    plugin_in_wheel: "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
    pins: include_str!("../../../third_party/xla-cpu-pjrt.sha256"),
    runtime: "",
    preload: &[],
    beside_executable: "xla_cpu_pjrt.so",
    env_var: "XLAFN_PJRT_PLUGIN",
    fetch_command: "xlafn fetch",
    fetch_call: "fetch_cpu_plugin()",
    install_call: "install_cpu_plugin",
    what: "the XLA CPU plugin",
};

const JAX_CUDA13: Package = Package {
    distribution: "jax-cuda13-pjrt",
    version: "0.12.0.1",
    plugin_in_wheel: "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
    pins: include_str!("../../../third_party/jax-cuda13-pjrt.sha256"),
    runtime: include_str!("../../../third_party/jax-cuda13-runtime.sha256"),
    preload: &[],
    beside_executable: "xla_cuda_plugin.so",
    env_var: "XLAFN_CUDA_PLUGIN",
    fetch_command: "xlafn fetch --cuda jax-cuda13-pjrt",
    fetch_call: "fetch_cuda_plugin(CudaPackage::JaxCuda13)",
    install_call: "install_cuda_plugin",
    what: "JAX's CUDA 13 plugin with its CUDA libraries",
};

const JAX_CUDA12: Package = Package {
    distribution: "jax-cuda12-pjrt",
    version: "0.12.0.1",
    plugin_in_wheel: "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
    pins: include_str!("../../../third_party/jax-cuda12-pjrt.sha256"),
    runtime: include_str!("../../../third_party/jax-cuda12-runtime.sha256"),
    // Its RPATH lists every library folder but nvrtc's (JAX's Python side
    // preloads it); already loaded, it is found by its name.
    preload: &["nvidia/cuda_nvrtc/lib/libnvrtc.so.12"],
    beside_executable: "xla_cuda_plugin.so",
    env_var: "XLAFN_CUDA_PLUGIN",
    fetch_command: "xlafn fetch --cuda jax-cuda12-pjrt",
    fetch_call: "fetch_cuda_plugin(CudaPackage::JaxCuda12)",
    install_call: "install_cuda_plugin",
    what: "JAX's CUDA 12 plugin with its CUDA libraries",
};

const XLA_CUDA13: Package = Package {
    distribution: "xla-cuda13-pjrt",
    version: "0.0.1",
    plugin_in_wheel: "xla_plugins/xla_cuda13_pjrt/xla_gpu_pjrt.so",
    pins: include_str!("../../../third_party/xla-cuda13-pjrt.sha256"),
    runtime: include_str!("../../../third_party/xla-cuda13-runtime.sha256"),
    preload: &[],
    beside_executable: "xla_gpu_pjrt.so",
    env_var: "XLAFN_CUDA_PLUGIN",
    fetch_command: "xlafn fetch --cuda xla-cuda13-pjrt",
    fetch_call: "fetch_cuda_plugin(CudaPackage::XlaCuda13)",
    install_call: "install_cuda_plugin",
    what: "OpenXLA's CUDA 13 plugin with its CUDA libraries",
};

const XLA_CUDA12: Package = Package {
    distribution: "xla-cuda12-pjrt",
    version: "0.0.1",
    plugin_in_wheel: "xla_plugins/xla_cuda12_pjrt/xla_gpu_pjrt.so",
    pins: include_str!("../../../third_party/xla-cuda12-pjrt.sha256"),
    runtime: include_str!("../../../third_party/xla-cuda12-runtime.sha256"),
    preload: &[],
    beside_executable: "xla_gpu_pjrt.so",
    env_var: "XLAFN_CUDA_PLUGIN",
    fetch_command: "xlafn fetch --cuda xla-cuda12-pjrt",
    fetch_call: "fetch_cuda_plugin(CudaPackage::XlaCuda12)",
    install_call: "install_cuda_plugin",
    what: "OpenXLA's CUDA 12 plugin with its CUDA libraries",
};

/// The CUDA plugins xlafn fetches, each pinned with the NVIDIA wheels of
/// the CUDA libraries it loads. `XLAFN_CUDA_PACKAGE` chooses the one
/// `XLAFN_DEVICE=cuda` uses when `XLAFN_CUDA_PLUGIN` names none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CudaPackage {
    /// `jax-cuda13-pjrt` 0.12.0.1, JAX's plugin for CUDA 13 (driver 580
    /// or newer), with cuBLAS, cuDNN, cuFFT, cuSOLVER, NCCL, ptxas and
    /// libdevice: the default.
    #[default]
    JaxCuda13,
    /// `jax-cuda12-pjrt` 0.12.0.1, JAX's plugin for CUDA 12.9 (driver 575
    /// or newer), with the same libraries for CUDA 12.
    JaxCuda12,
    /// `xla-cuda13-pjrt` 0.0.1, OpenXLA's plugin of the CPU plugin's
    /// release (PJRT C API 0.81, the bindings' own), with the libraries it
    /// links (no cuFFT, no NCCL); it also needs the driver's unversioned
    /// `libcuda.so`.
    XlaCuda13,
    /// `xla-cuda12-pjrt` 0.0.1, the same for CUDA 12.9.
    XlaCuda12,
}

impl CudaPackage {
    /// Every CUDA package, the default first.
    pub const ALL: [CudaPackage; 4] = [
        CudaPackage::JaxCuda13,
        CudaPackage::JaxCuda12,
        CudaPackage::XlaCuda13,
        CudaPackage::XlaCuda12,
    ];

    /// The distribution's name, as `XLAFN_CUDA_PACKAGE` and
    /// `xlafn fetch --cuda` take it (`jax-cuda13-pjrt`).
    pub fn name(self) -> &'static str {
        self.package().distribution
    }

    pub(crate) fn package(self) -> &'static Package {
        match self {
            CudaPackage::JaxCuda13 => &JAX_CUDA13,
            CudaPackage::JaxCuda12 => &JAX_CUDA12,
            CudaPackage::XlaCuda13 => &XLA_CUDA13,
            CudaPackage::XlaCuda12 => &XLA_CUDA12,
        }
    }

    /// The package `XLAFN_CUDA_PACKAGE` names (the default when unset).
    pub(crate) fn from_env() -> Result<CudaPackage> {
        match crate::environment::CUDA_PACKAGE.get() {
            None => Ok(CudaPackage::default()),
            Some(v) if v.trim().is_empty() => Ok(CudaPackage::default()),
            Some(v) => v.parse().map_err(|e: Error| match e {
                Error::Value(m) => Error::Value(format!("XLAFN_CUDA_PACKAGE: {m}")),
                other => other,
            }),
        }
    }
}

impl std::fmt::Display for CudaPackage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CudaPackage {
    type Err = Error;

    /// The distribution's name (`jax-cuda13-pjrt`), or its short form
    /// (`jax-cuda13`, `13` for JAX's CUDA 13 plugin, `12` for its CUDA 12 one).
    fn from_str(s: &str) -> Result<CudaPackage> {
        let s = s.trim();
        let short = |p: CudaPackage| p.name().trim_end_matches("-pjrt").to_string();
        CudaPackage::ALL
            .into_iter()
            .find(|p| s == p.name() || s == short(*p))
            .or(match s {
                "13" => Some(CudaPackage::JaxCuda13),
                "12" => Some(CudaPackage::JaxCuda12),
                _ => None,
            })
            .ok_or_else(|| {
                Error::Value(format!(
                    "{s:?} names no CUDA plugin xlafn fetches: use one of {}",
                    CudaPackage::ALL.map(CudaPackage::name).join(", ")
                ))
            })
    }
}

/// A wheel this crate accepts: its file name and sha256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pin {
    pub(crate) file_name: String,
    pub(crate) sha256: String,
}

impl Pin {
    /// The wheel's distribution and version, from its file name
    /// (`{distribution}-{version}-{python}-{abi}-{platform}.whl`).
    pub(crate) fn distribution_and_version(&self) -> (&str, &str) {
        let mut parts = self.file_name.split('-');
        (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        )
    }

    /// `distribution==version`, what pip is asked for.
    pub(crate) fn requirement(&self) -> String {
        let (distribution, version) = self.distribution_and_version();
        format!("{distribution}=={version}")
    }

    /// The wheel's first platform tag (a file may name several, joined
    /// with dots), which pip is told to fetch for.
    pub(crate) fn platform(&self) -> &str {
        let stem = self.file_name.trim_end_matches(".whl");
        let tags = stem.rsplit('-').next().unwrap_or_default();
        tags.split('.').next().unwrap_or_default()
    }

    /// Is this wheel for the machine this program runs on?
    fn fits_this_machine(&self) -> bool {
        std::env::consts::OS == "linux"
            && self.file_name.contains("linux")
            && self
                .file_name
                .ends_with(&format!("_{}.whl", std::env::consts::ARCH))
    }
}

/// The `sha256  file name` lines of a pin file; `#` lines are comments.
fn parse_pins(text: &str) -> Vec<Pin> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| line.split_once(char::is_whitespace))
        .map(|(sha, name)| Pin {
            sha256: sha.to_ascii_lowercase(),
            file_name: name.trim().trim_start_matches('*').to_string(),
        })
        .collect()
}

impl Package {
    /// `distribution==version`, what pip is asked for.
    pub(crate) fn requirement(&self) -> String {
        format!("{}=={}", self.distribution, self.version)
    }

    /// The cache entry's folder name (`xla-cpu-pjrt-0.0.1`).
    pub(crate) fn entry_name(&self) -> String {
        format!("{}-{}", self.distribution, self.version)
    }

    /// The plugin's wheel pinned for the platform this program runs on.
    pub(crate) fn pin(&self) -> Result<Pin> {
        self.pins()
            .into_iter()
            .find(Pin::fits_this_machine)
            .ok_or_else(|| self.unsupported_platform())
    }

    /// Every pinned wheel of the plugin itself, for every platform.
    pub(crate) fn pins(&self) -> Vec<Pin> {
        parse_pins(self.pins)
    }

    /// Every pinned wheel of every platform, the plugin's and its
    /// libraries' (for telling a wheel of another platform apart).
    pub(crate) fn all_pins(&self) -> Vec<Pin> {
        let mut all = self.pins();
        all.extend(parse_pins(self.runtime));
        all
    }

    /// The wheels an entry is made of on this machine: the plugin's first,
    /// then its libraries', one per distribution.
    pub(crate) fn wheels(&self) -> Result<Vec<Pin>> {
        let mut wheels = vec![self.pin()?];
        wheels.extend(
            parse_pins(self.runtime)
                .into_iter()
                .filter(Pin::fits_this_machine),
        );
        Ok(wheels)
    }

    pub(crate) fn unsupported_platform(&self) -> Error {
        let published: Vec<String> = self
            .pins()
            .iter()
            .filter_map(|p| {
                p.file_name
                    .rsplit_once('_')
                    .map(|(_, arch)| format!("Linux {}", arch.trim_end_matches(".whl")))
            })
            .collect();
        Error::Plugin(format!(
            "{} ({}) is published only for {}, and this program runs on {} {}: set \
             {} to a PJRT plugin built for this machine",
            self.what,
            self.requirement(),
            published.join(" and "),
            std::env::consts::OS,
            std::env::consts::ARCH,
            self.env_var
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_package_pins_its_wheels_for_each_published_platform() {
        for package in
            std::iter::once(&CPU).chain(CudaPackage::ALL.map(CudaPackage::package).iter().copied())
        {
            let pins = package.pins();
            assert_eq!(pins.len(), 2, "{}: {pins:?}", package.distribution);
            let prefix = format!(
                "{}-{}-",
                package.distribution.replace('-', "_"),
                package.version
            );
            for pin in package.all_pins() {
                assert_eq!(pin.sha256.len(), 64, "{pin:?}");
                assert!(pin.sha256.bytes().all(|b| b.is_ascii_hexdigit()), "{pin:?}");
                assert!(pin.file_name.ends_with(".whl"), "{pin:?}");
            }
            for pin in &pins {
                assert!(pin.file_name.starts_with(&prefix), "{pin:?}");
            }
            // The libraries: the same distributions for both platforms.
            let runtime = parse_pins(package.runtime);
            let names = |arch: &str| {
                let mut n: Vec<String> = runtime
                    .iter()
                    .filter(|p| p.file_name.ends_with(&format!("_{arch}.whl")))
                    .map(|p| p.requirement())
                    .collect();
                n.sort();
                n
            };
            assert_eq!(
                names("x86_64"),
                names("aarch64"),
                "{}",
                package.distribution
            );
            assert_eq!(
                names("x86_64").len() * 2,
                runtime.len(),
                "{}",
                package.distribution
            );
            if std::env::consts::OS == "linux" {
                let wheels = package.wheels().unwrap();
                assert_eq!(wheels.len(), 1 + runtime.len() / 2);
                assert!(
                    wheels
                        .iter()
                        .all(|w| w.file_name.contains(std::env::consts::ARCH))
                );
            }
        }
    }

    #[test]
    fn a_pin_names_its_distribution_version_and_platform() {
        let pin = Pin {
            file_name: "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl".into(),
            sha256: "0".repeat(64),
        };
        assert_eq!(
            pin.distribution_and_version(),
            ("nvidia_cuda_runtime", "13.0.96")
        );
        assert_eq!(pin.requirement(), "nvidia_cuda_runtime==13.0.96");
        assert_eq!(pin.platform(), "manylinux2014_x86_64");
    }

    #[test]
    fn cuda_packages_are_named_as_pip_names_them() {
        for p in CudaPackage::ALL {
            assert_eq!(p.name().parse::<CudaPackage>().unwrap(), p);
        }
        assert_eq!("13".parse::<CudaPackage>().unwrap(), CudaPackage::JaxCuda13);
        assert_eq!(
            "jax-cuda12".parse::<CudaPackage>().unwrap(),
            CudaPackage::JaxCuda12
        );
        let e = "cuda11".parse::<CudaPackage>().unwrap_err().to_string();
        assert!(
            e.contains("jax-cuda13-pjrt") && e.contains("xla-cuda12-pjrt"),
            "{e}"
        );
        assert_eq!(CudaPackage::default(), CudaPackage::JaxCuda13);
    }
}
