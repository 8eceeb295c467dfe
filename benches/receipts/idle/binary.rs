//! The release build of the server binary, which `idle` measures as its own process.

use std::path::PathBuf;

/// `$CARGO_TARGET_DIR/release`, found from this bench's own path (`…/release/deps/receipts-…`).
fn release_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .ok_or_else(|| format!("cannot find the target directory from {}", exe.display()))
}

/// Builds the release server binary into the same target directory and returns its path.
pub fn build_server_binary() -> Result<PathBuf, String> {
    let release = release_dir()?;
    let target = release.parent().ok_or("no target directory")?.to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "idle: cargo build --release --bin chorus (CARGO_TARGET_DIR={})",
        target.display()
    );
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--bin", "chorus"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build --release --bin chorus: {status}"));
    }
    let binary = release.join("chorus");
    binary
        .exists()
        .then_some(binary.clone())
        .ok_or_else(|| format!("{} does not exist after the build", binary.display()))
}
