//! Replays every committed corpus file (`corpus/<target>/*`) through its target's check, in a
//! plain (uninstrumented) build: `cargo test --manifest-path fuzz/Cargo.toml`. The seeds and
//! every minimised finding added later stay green without the fuzzer.

use std::path::Path;

#[test]
fn every_corpus_file_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for target in tidemark_fuzz::TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("corpus entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no seeds in {}", dir.display());
        let only = std::env::var("TIDEMARK_FUZZ_ONLY").unwrap_or_default();
        for file in files.iter().filter(|f| f.to_string_lossy().contains(only.as_str())) {
            let data = std::fs::read(file).expect("corpus file");
            eprintln!("{target}: {}", file.display());
            assert!(tidemark_fuzz::check(target, &data));
        }
        eprintln!("{target}: {} inputs", files.len());
    }
}
