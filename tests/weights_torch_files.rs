//! PyTorch's `torch.save` archives read in Rust: the fixture's
//! `state_dict.pth` (written by `torch.save` of a real `state_dict()`,
//! an `OrderedDict` with `_metadata`) gives the same tensors as the same
//! state dict in safetensors, loads with the PyTorch preset, and crafted
//! or damaged archives are refused with an error, never run or panicked
//! on.

use std::io::{Read, Write};
use xlafn::prelude::*;
use xlafn::weights::Weights;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch");

fn pth() -> String {
    format!("{FIXTURES}/state_dict.pth")
}

#[test]
fn a_torch_save_archive_holds_what_its_safetensors_twin_holds() {
    let torch = Weights::open(pth()).unwrap();
    let twin = Weights::open(format!("{FIXTURES}/state_dict.safetensors")).unwrap();
    assert_eq!(torch.names(), twin.names());
    for name in twin.names() {
        assert_eq!(
            torch.info(name).unwrap(),
            twin.info(name).unwrap(),
            "{name}"
        );
        let (a, b) = (torch.tensor(name).unwrap(), twin.tensor(name).unwrap());
        assert_eq!(
            a.to_host_array().unwrap().bytes,
            b.to_host_array().unwrap().bytes,
            "{name}"
        );
    }
}

/// The archive's members, read whole.
fn members() -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(pth()).unwrap();
    let mut zip = zip::ZipArchive::new(file).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut m = zip.by_index(i).unwrap();
            let mut bytes = Vec::new();
            m.read_to_end(&mut bytes).unwrap();
            (m.name().to_string(), bytes)
        })
        .collect()
}

/// A copy of the archive with `change` applied to its members, written
/// to a temporary file.
fn crafted(change: impl Fn(&str, Vec<u8>) -> Option<Vec<u8>>) -> tempfile::NamedTempFile {
    let out = tempfile::Builder::new().suffix(".pth").tempfile().unwrap();
    let mut zip = zip::ZipWriter::new(std::fs::File::create(out.path()).unwrap());
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in members() {
        if let Some(bytes) = change(&name, bytes) {
            zip.start_file(name, options).unwrap();
            zip.write_all(&bytes).unwrap();
        }
    }
    zip.finish().unwrap();
    out
}

fn open_error(path: &std::path::Path) -> String {
    match Weights::open(path) {
        Ok(w) => {
            // Opening may succeed when damage is in data only: reading then fails.
            let errors: Vec<String> = w
                .names()
                .iter()
                .filter_map(|n| w.tensor(n).err().map(|e| e.to_string()))
                .collect();
            assert!(
                !errors.is_empty(),
                "{} was read without an error",
                path.display()
            );
            errors.join("; ")
        }
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_pickle_that_names_code_is_refused_before_anything_runs() {
    let evil = b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.".to_vec();
    let file = crafted(|name, bytes| {
        Some(if name.ends_with("data.pkl") {
            evil.clone()
        } else {
            bytes
        })
    });
    let e = Weights::open(file.path()).unwrap_err().to_string();
    assert!(e.contains("os.system") && e.contains("no code"), "{e}");
}

#[test]
fn a_storage_shorter_than_its_tensor_is_refused() {
    let file = crafted(|name, mut bytes| {
        if name.ends_with("/data/0") {
            bytes.truncate(bytes.len() - 4);
        }
        Some(bytes)
    });
    let e = Weights::open(file.path()).unwrap_err().to_string();
    assert!(e.contains("storage 0 holds 428 bytes"), "{e}");
    let missing = crafted(|name, bytes| (!name.ends_with("/data/3")).then_some(bytes));
    let e = Weights::open(missing.path()).unwrap_err().to_string();
    assert!(e.contains("storage 3 is missing"), "{e}");
}

#[test]
fn every_cut_of_the_archive_or_its_pickle_is_an_error() {
    let whole = std::fs::read(pth()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in (0..whole.len()).step_by(whole.len() / 40) {
        let path = dir.path().join(format!("cut{cut}.pth"));
        std::fs::write(&path, &whole[..cut]).unwrap();
        let _ = open_error(&path);
    }
    let pickle_len = members()
        .into_iter()
        .find(|(n, _)| n.ends_with("data.pkl"))
        .unwrap()
        .1
        .len();
    for cut in (0..pickle_len).step_by(97) {
        let file = crafted(|name, mut bytes| {
            if name.ends_with("data.pkl") {
                bytes.truncate(cut);
            }
            Some(bytes)
        });
        assert!(Weights::open(file.path()).is_err(), "pickle cut at {cut}");
    }
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("weights.pth");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(Weights::open(&fifo).is_err());
}

#[test]
fn a_state_dict_read_from_pth_loads_with_the_torch_preset() {
    use xlafn::module::Module;
    use xlafn::nn::layers::{Layer, Linear};
    use xlafn::weights::{self, LoadOptions, Mapping};
    #[derive(Module)]
    struct Head {
        fc: Linear,
    }
    let head = Head {
        fc: Linear::new(&xlafn::random::key(0).unwrap(), 6, 5).unwrap(),
    };
    let file = Weights::open(pth()).unwrap();
    let options = LoadOptions::default().allow_unused(true);
    weights::load_into(&head, &file, &Mapping::new().torch(&head), options).unwrap();
    let io = Weights::open(format!("{FIXTURES}/io.safetensors")).unwrap();
    let y = head.fc.forward(&io.tensor("features").unwrap()).unwrap();
    let want = io.tensor("fc_out").unwrap();
    let diff = y
        .sub(&want)
        .unwrap()
        .abs()
        .unwrap()
        .reduce_max(&[], false)
        .unwrap();
    assert!(diff.item::<f32>().unwrap() < 1e-5);
    let _ = DType::F32;
}
