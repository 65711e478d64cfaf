//! Writes the Lua fragments that a script uses with its own keys or
//! arguments: each template in `src/kit/lua/templates/` names its
//! parameters `@name@`, and each instance below gives them values. The
//! scripts (`src/kit/scripts.rs`) pull the instances in from `OUT_DIR`, so a
//! fragment is written once however many scripts use it.

use std::path::Path;
use std::{env, fs};

/// `(template, instance, [(parameter, value)])`.
type Instance = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const INSTANCES: &[Instance] = &[
    ("next_fence", "next_fence_keys2", &[("counter", "KEYS[2]")]),
    ("next_fence", "next_fence_keys3", &[("counter", "KEYS[3]")]),
    (
        "take_place",
        "take_place_keys2",
        &[("line", "KEYS[2]"), ("lapse", "KEYS[3]")],
    ),
    (
        "take_place",
        "take_place_keys3",
        &[("line", "KEYS[3]"), ("lapse", "KEYS[4]")],
    ),
    (
        "announce_turn",
        "announce_turn_argv6",
        &[("inbox", "ARGV[6]")],
    ),
    (
        "announce_turn",
        "announce_turn_argv3",
        &[("inbox", "ARGV[3]")],
    ),
    (
        "reserve_for_head",
        "reserve_for_head_keys2",
        &[
            ("key", "KEYS[1]"),
            ("line", "KEYS[2]"),
            ("lapse", "KEYS[3]"),
            ("seq", "KEYS[4]"),
        ],
    ),
    (
        "reserve_for_head",
        "reserve_for_head_keys3",
        &[
            ("key", "KEYS[1]"),
            ("line", "KEYS[3]"),
            ("lapse", "KEYS[4]"),
            ("seq", "KEYS[5]"),
        ],
    ),
    ("leave_line_1", "leave_line_granted_1", &[("id", "granted")]),
    ("leave_line_1", "leave_line_argv1_1", &[("id", "ARGV[1]")]),
    (
        "leave_line_2",
        "leave_line_granted_2",
        &[("announce", "ARGV[2] ~= '0'")],
    ),
    (
        "leave_line_2",
        "leave_line_argv1_2",
        &[("announce", "ARGV[2] ~= '1'")],
    ),
];

fn main() {
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("lua");
    fs::create_dir_all(&out).expect("create OUT_DIR/lua");
    println!("cargo:rerun-if-changed=build.rs");
    for (template, instance, params) in INSTANCES {
        let path = format!("src/kit/lua/templates/{template}.lua");
        println!("cargo:rerun-if-changed={path}");
        let mut text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        for (name, value) in *params {
            let placeholder = format!("@{name}@");
            assert!(
                text.contains(&placeholder),
                "{path} has no {placeholder} for {instance}"
            );
            text = text.replace(&placeholder, value);
        }
        assert!(
            !text.contains('@'),
            "{path}: a parameter of {instance} has no value"
        );
        fs::write(out.join(format!("{instance}.lua")), text).expect("write a Lua fragment");
    }
}
