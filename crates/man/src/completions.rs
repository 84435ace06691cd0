//! Shell completions for profdev and the classic command names, generated
//! by clap_complete from the same description of each command that its
//! `--help` and its man page come from. A classic name (`kprof`, run
//! through a link to profdev) completes as `profdev NAME`: bash rewrites
//! the words, zsh's `#compdef` line names it, fish wraps it.

pub use clap_complete::Shell;

/// The completion script for `shell` of `root` (profdev with every
/// subcommand), which also completes the `classic` names as `profdev
/// NAME`.
pub fn script(shell: Shell, mut root: clap::Command, classic: &[&str]) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut root, "profdev", &mut out);
    let script = String::from_utf8(out).expect("clap_complete writes UTF-8");
    let names = classic.join(" ");
    match shell {
        // A classic name completes as `profdev NAME`: the words are
        // rewritten to that and profdev's function does the rest.
        Shell::Bash => format!(
            "{script}
# The classic names, run through links to profdev (ln -s profdev kprof).
_profdev_classic() {{
    local COMP_CWORD=$((COMP_CWORD + 1))
    local -a COMP_WORDS=(profdev \"${{COMP_WORDS[@]}}\")
    _profdev profdev \"$2\" \"$3\"
}}
complete -F _profdev_classic -o nosort -o bashdefault -o default {names}
"
        ),
        Shell::Zsh => {
            // Autoloaded from $fpath, the file is the function `_profdev`
            // for every name on its #compdef line; sourced, it registers
            // itself and the classic names with compdef.
            let script = script.replacen(
                "#compdef profdev\n",
                &format!("#compdef profdev {names}\n"),
                1,
            );
            let tail = "if [ \"$funcstack[1]\" = \"_profdev\" ]; then";
            let body = match script.rfind(tail) {
                Some(i) => &script[..i],
                None => script.as_str(),
            };
            format!(
                "{body}# The classic names, run through links to profdev (ln -s profdev kprof).
_profdev_classic() {{
    if [[ $service != profdev ]]; then
        words=(profdev \"${{words[@]}}\")
        (( CURRENT++ ))
    fi
    _profdev \"$@\"
}}

{tail}
    _profdev_classic \"$@\"
else
    compdef _profdev profdev
    compdef _profdev_classic {names}
fi
"
            )
        }
        Shell::Fish => {
            let mut s = script;
            s.push_str(
                "\n# The classic names, run through links to profdev (ln -s profdev kprof).\n",
            );
            for name in classic {
                s.push_str(&format!("complete -c {name} -w 'profdev {name}'\n"));
            }
            s
        }
        // Other shells complete profdev alone.
        _ => script,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> clap::Command {
        clap::Command::new("profdev")
            .subcommand_required(true)
            .subcommand(clap::Command::new("kprof").arg(clap::Arg::new("FILE")))
            .subcommand(clap::Command::new("stat"))
    }

    #[test]
    fn classic_names_complete_as_profdev_name() {
        let bash = script(Shell::Bash, root(), &["kprof", "prfpr"]);
        assert!(bash.contains("_profdev()"), "{bash}");
        assert!(bash.ends_with(
            "complete -F _profdev_classic -o nosort -o bashdefault -o default kprof prfpr\n"
        ));
        let zsh = script(Shell::Zsh, root(), &["kprof"]);
        assert!(zsh.starts_with("#compdef profdev kprof\n"), "{zsh}");
        assert!(
            zsh.contains("    compdef _profdev_classic kprof\nfi\n"),
            "{zsh}"
        );
        assert_eq!(
            zsh.matches("if [ \"$funcstack[1]\" = \"_profdev\" ]; then")
                .count(),
            1
        );
        let fish = script(Shell::Fish, root(), &["kprof"]);
        assert!(
            fish.ends_with("complete -c kprof -w 'profdev kprof'\n"),
            "{fish}"
        );
    }
}
