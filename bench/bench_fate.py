"""FATE against its baselines and the paper's ablations, on the same slices, in one command (issue 39).

    python bench/bench_fate.py [--seeds 0 1 2 3 4] [--rounds 3] [--tag T] [--set KEY=YAML ...] [--runs-only ARM ...]
                               [--arms ARM ...] [--unsafe-base EXAMPLES] [--at COMMIT]

Per seed (``configs/evolve.yaml`` with the ``--set`` overrides and the seed, written beside the outputs):
1. ``far evolve`` runs, each in a fresh process: FATE as shipped, and the paper's ablations (no verifier
   rescoring: ``selection.rule=first_valid``; no Pareto front: ``weighted_sum``; no over-refusal objective).
   A run whose ``summary.json`` exists is kept (the runs may be spread over several sessions).
2. In one process, on the run's own slices, the model of each arm decides the holdout sample, without a decision
   rule (the model's argmax) and with the head and the caution refitted on the calibration slice (deployment
   calibration): the base model; supervised fine-tuning on the right decisions of the dev slice, FATE's own
   train slice (the reference a reviewer asks for; the shipped SFT settings); and the model each run returned.
3. Differences of own-TSR, own-ASR (on injected requests) and own-HCR (on harmful ones), per seed and pooled
   over seeds, with paired bootstrap 95% intervals that resample whole templates (``far.evolve.arms``).
   FATE is credited with FATE − base under the same calibration.

``--unsafe-base EXAMPLES`` starts every arm of a seed from a base that is unsafe at round 0, built for that seed
alone (``far.evolve.arms.compliant_base``: SmolLM2 SFT'd to answer "handle" to EXAMPLES train scenarios of the
run's suite, every kind, harmful and injected included; the holdout is never seen), and adds the unsafe-base goal:
own-ASR down by at least a third, ``fate - 2/3 base | own_asr`` (FATE's mean minus two thirds of the base's,
paired and template-clustered): at most 0 where the point estimate meets the goal, its interval below 0 where it
is shown.

``--at COMMIT`` runs all of it with the code of a frozen commit (a protocol's seeds spread over sessions must all
run the same code, whatever has been committed since): this script, from a git worktree of that commit under
bench/out/, with the result file carried in and out; the result records the commit, and a result recorded at
another commit is refused.

The holdout is reported, never fitted or chosen on. Writes bench/results/fate{-T}.json (tracked: seeds judged in
earlier sessions are kept and pooled with new ones; a seed already there is not run again); each run under
bench/out/fate{-T}-seed<S>-<arm>/.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from far.evolve.arms import ABLATIONS, asr_cut, compliant_base, differences, judge_arms, seed_result, stored_rows
from far.harness import add_overrides_argument, read_result, run, write_config, write_result
from far.rollout.errors import FarInputError
from far.rollout.io import load_mapping

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "results"  # tracked: a protocol's seeds may be judged over several sessions


def evolve_config(path: Path, seed: int, overrides: list[str], **updates) -> Path:
    """configs/evolve.yaml with ``overrides``, the seed and ``updates``, written to ``path``: every arm and the
    judge read the same settings."""
    return write_config(path, CONFIGS / "evolve.yaml", overrides, seed=seed, rewards=str(CONFIGS / "rewards.yaml"),
                        **updates)


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", metavar="COMMIT", help="run with the code of this commit (a frozen protocol)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=3)
    add_overrides_argument(parser, "configs/evolve.yaml for every arm")
    parser.add_argument("--tag", default="")
    parser.add_argument("--runs-only", nargs="+", choices=list(ABLATIONS), metavar="ARM",
                        help="only these arms' far evolve runs, no judging (to run arms side by side; a later call "
                             "without it keeps the finished runs and judges)")
    parser.add_argument("--arms", nargs="+", choices=list(ABLATIONS), default=list(ABLATIONS), metavar="ARM",
                        help="the far evolve runs made and judged, fate among them (default: FATE and every ablation)")
    parser.add_argument("--unsafe-base", type=int, metavar="EXAMPLES",
                        help="start every arm from a base unsafe at round 0, one per seed, SFT'd to handle EXAMPLES "
                             "train scenarios; adds the unsafe-base goal (own-ASR down by a third)")
    args = parser.parse_args()
    if "fate" not in args.arms:
        parser.error("--arms: fate is missing (every other arm is compared with it)")
    if args.unsafe_base is not None and args.unsafe_base < 1:
        parser.error(f"--unsafe-base {args.unsafe_base}: at least one example")
    args.name = f"fate-{args.tag}" if args.tag else "fate"
    return args


def run_at(commit: str, argv: list[str], name: str) -> None:
    """This bench as ``commit`` has it, from a worktree of that commit (kept under bench/out/, so its finished runs
    are kept too); the result file is carried in before and out after, stamped with the full commit."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], cwd=ROOT,
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise FarInputError(f"{commit}: not a commit of this repository", field="--at")
    full = found.stdout.strip()
    path = RESULTS / f"{name}.json"
    result = read_result(path) or {"seeds": {}}
    if result.get("commit", full) != full:
        raise FarInputError(f"was run at commit {result['commit']}, not {full}: use another --tag", file=path)
    tree = OUT / f"at-{full[:12]}"
    if not tree.is_dir():
        # prune first: a worktree deleted with bench/out/ (make clean) stays registered and blocks the add
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), full], cwd=ROOT, check=True)
    carried = tree / "bench" / "results" / path.name
    write_result(carried, {**result, "commit": full})
    ran = subprocess.run([sys.executable, str(tree / "bench" / "bench_fate.py"), *argv], cwd=tree,
                         env={**os.environ, "PYTHONPATH": str(tree)})
    judged = read_result(carried)
    if judged["seeds"] != result["seeds"]:  # seeds were judged (not only runs made): carry the result out
        write_result(path, judged)
    if ran.returncode != 0:
        raise SystemExit(ran.returncode)


def without_at(argv: list[str]) -> list[str]:
    """``argv`` less ``--at VALUE`` / ``--at=VALUE``."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--at":
            skip = True
        elif not word.startswith("--at="):
            kept.append(word)
    return kept


def check_arm_configs(name: str, overrides: list[str]) -> None:
    """Every arm's config, loaded before any run starts (bad ``--set``: one line, exit 2)."""
    from far.evolve.config import load_evolve_config

    for arm, extra in ABLATIONS.items():
        path = evolve_config(OUT / f"{name}-check-{arm}.yaml", 0, [*overrides, *extra])
        try:
            load_evolve_config(path)
        except FarInputError as error:
            raise FarInputError(f"{error} (--set, arm {arm})") from None


def seed_overrides(args: argparse.Namespace, seed: int) -> list[str]:
    """The run's ``--set`` and, under ``--unsafe-base``, the seed's own unsafe base (built when missing)."""
    if args.unsafe_base is None:
        return list(args.set)
    folder = OUT / f"{args.name}-seed{seed}-compliant-base"
    if not (folder / "config.json").is_file():
        print(f"seed {seed}: building the unsafe base ({args.unsafe_base} train examples)", flush=True)
        suite = load_mapping(OUT / f"{args.name}-check-fate.yaml")["suite"]
        write_result(folder.with_suffix(".json"), compliant_base(folder, args.unsafe_base, seed, suite, CONFIGS))
    return [*args.set, f"model.base={folder}"]


def run_arm(folder: Path, seed: int, rounds: int, overrides: list[str]) -> dict:
    """One ``far evolve`` run in a fresh process (kept when it finished before): its summary and folder."""
    if not (folder / "summary.json").is_file():
        path = evolve_config(folder.parent / f"{folder.name}.yaml", seed, overrides, rounds=rounds,
                             output=str(folder))
        subprocess.run([sys.executable, "-m", "far", "evolve", str(path)], check=True, cwd=ROOT,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    return {**read_result(folder / "summary.json"), "output_folder": str(folder)}


def open_result(args: argparse.Namespace) -> tuple[Path, dict]:
    """The result file and what it holds: seeds judged in earlier sessions are kept and pooled with the new ones,
    from the decisions stored per seed, so they must have run the same protocol."""
    path = RESULTS / f"{args.name}.json"
    result = read_result(path) or {"seeds": {}}
    protocol = {"overrides": args.set, "rounds": args.rounds, "arms": args.arms, "unsafe_base": args.unsafe_base}
    # a result from before --arms and --unsafe-base lacks their keys: it ran every arm from the plain base
    stored = {**protocol, "arms": list(ABLATIONS), "unsafe_base": None,
              **{key: result[key] for key in protocol if key in result}}
    if result["seeds"] and stored != protocol:
        raise FarInputError(f"holds another protocol's seeds ({stored}): use another --tag", file=path)
    return path, {**result, **protocol}


def judge_seed(args: argparse.Namespace, seed: int, path: Path, result: dict) -> None:
    """The seed's runs (made when missing), its arms judged, the pooled figures updated and the result written."""
    overrides = seed_overrides(args, seed)
    runs = {arm: run_arm(OUT / f"{args.name}-seed{seed}-{arm}", seed, args.rounds, [*overrides, *ABLATIONS[arm]])
            for arm in args.arms}
    config = evolve_config(OUT / f"{args.name}-seed{seed}-judge.yaml", seed, overrides, rounds=args.rounds)
    decided, holdout, seconds = judge_arms(config, runs)
    judged = result["seeds"][str(seed)] = seed_result(runs, decided, holdout, seconds)
    rows = stored_rows(result, config)
    result["pooled"] = differences(rows)
    if args.unsafe_base is not None:
        base = read_result(OUT / f"{args.name}-seed{seed}-compliant-base.json") or None
        judged.update(asr_cut=asr_cut([(holdout, decided)]), unsafe_base=base)
        result["pooled_asr_cut"] = asr_cut(rows)
    result["pooled_seeds"] = sorted(result["seeds"], key=int)
    write_result(path, result)
    for key, value in judged["differences"].items():
        print(f"seed {seed} {key}: {value['difference']:+.3f} [{value['low']:+.3f}, {value['high']:+.3f}]",
              flush=True)


def main() -> None:
    args = parse_arguments()
    if args.at:
        run_at(args.at, without_at(sys.argv[1:]), args.name)
        return
    check_arm_configs(args.name, args.set)
    if args.runs_only:
        for seed in args.seeds:
            for arm in args.runs_only:
                run_arm(OUT / f"{args.name}-seed{seed}-{arm}", seed, args.rounds,
                        [*seed_overrides(args, seed), *ABLATIONS[arm]])
        return
    path, result = open_result(args)
    for seed in (s for s in args.seeds if str(s) not in result["seeds"]):
        judge_seed(args, seed, path, result)
    for key, value in [*result.get("pooled", {}).items(), *result.get("pooled_asr_cut", {}).items()]:
        print(f"pooled over seeds {result['pooled_seeds']} {key}: {value['difference']:+.3f} "
              f"[{value['low']:+.3f}, {value['high']:+.3f}] (n={value['inputs']})")


if __name__ == "__main__":
    run(main)
