//! The container's first process: `nodelet-container-init SPEC.json` sets up the container's
//! mount namespace as the spec says, then executes the container's program.

fn main() {
    let code = nodelet_runtime::sandbox::init_main(std::env::args_os().skip(1));
    std::process::exit(code);
}
