"""Curve tables in and out (from_long, save / load, load into abstract trees) and the command line."""

import subprocess
import textwrap
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxstop
from jaxstop import policies, sim
from jaxstop.__main__ import main
from jaxstop.sim._cli import build_parser

NUM, T = 7, 6


def ragged(seed=0):
    """Curves of lengths 1..T (one of each extreme), NaN-padded, with test losses."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, NUM)
    lengths[:2] = (1, T)
    mask = np.arange(T)[None, :] < lengths[:, None]
    values = np.where(mask, rng.uniform(0.1, 0.9, (NUM, T)), np.nan)
    test = np.where(mask, values + rng.normal(0, 0.05, values.shape), np.nan)
    return values, test, mask, lengths


def records(values, test, mask, labels, rng):
    """The long layout of a table: one record per valid (row, epoch), shuffled."""
    rows, cols = np.nonzero(mask)
    order = rng.permutation(rows.size)
    rows, cols = rows[order], cols[order]
    return [labels[r] for r in rows], cols + 1, values[rows, cols], test[rows, cols], rows


def first_appearance(rows):
    seen = []
    for r in rows:
        if r not in seen:
            seen.append(r)
    return seen


@pytest.mark.parametrize("kind", ["str", "int", "tuple"])
def test_from_long_round_trips_ragged_unsorted_tables(kind):
    rng = np.random.default_rng(1)
    values, test, mask, lengths = ragged()
    labels = {"str": [f"lr={10.0 ** -i:g}" for i in range(NUM)], "int": list(range(100, 100 - NUM, -1)),
              "tuple": [(i % 2, f"opt{i}") for i in range(NUM)]}[kind]
    config, epoch, value, tst, rows = records(values, test, mask, labels, rng)
    table, got = sim.CurveTable.from_long(config, epoch, value, tst, return_labels=True)
    order = first_appearance(rows)            # table row i is original row order[i]
    assert got == [labels[r] for r in order]
    np.testing.assert_array_equal(np.asarray(table.mask), mask[order])
    np.testing.assert_array_equal(np.asarray(table.values), values[order])   # NaN padding included
    np.testing.assert_array_equal(np.asarray(table.test), test[order])
    np.testing.assert_array_equal(np.asarray(sim.curve_lengths(table)), lengths[order])
    assert table.configs is None
    # a NumPy string column (as read from a CSV) gives the same table
    if kind == "str":
        again = sim.CurveTable.from_long(np.asarray(config), epoch, value, tst)
        np.testing.assert_array_equal(np.asarray(again.values), np.asarray(table.values))


def test_from_long_rejects_tables_it_cannot_represent():
    with pytest.raises(ValueError, match="'a' has epoch 1 more than once"):
        sim.CurveTable.from_long(["a", "a"], [1, 1], [0.5, 0.4])
    with pytest.raises(ValueError, match="'b' has 2 epochs up to epoch 3"):
        sim.CurveTable.from_long(["a", "b", "b"], [1, 1, 3], [0.5, 0.4, 0.3])
    with pytest.raises(ValueError, match="epoch must be >= 1"):
        sim.CurveTable.from_long(["a", "a"], [0, 1], [0.5, 0.4])
    with pytest.raises(ValueError, match="epoch must hold whole numbers"):
        sim.CurveTable.from_long(["a"], [1.5], [0.5])
    with pytest.raises(ValueError, match="config must have one entry per record"):
        sim.CurveTable.from_long(["a"], [1, 2], [0.5, 0.4])
    # the column is named, and the record (not the table's entry, nor a mask from_long has not)
    with pytest.raises(ValueError, match="value holds 1 value.* not finite .* first at record 1"):
        sim.CurveTable.from_long(["a", "a"], [1, 2], [0.5, np.nan])
    # test losses are checked as the values are (a NaN there made every test regret NaN)
    with pytest.raises(ValueError, match="test holds 1 value.* not finite .* first at record 0"):
        sim.CurveTable.from_long(["a", "a"], [1, 2], [0.5, 0.4], [np.inf, 0.3])
    # a test loss only at the end of a curve (NaN before): leaving those records out, as the
    # error once advised, would drop their losses too; it says to fill them in or drop the column
    with pytest.raises(ValueError, match=r"first at record 0: every record needs a finite test loss.*test=None"):
        sim.CurveTable.from_long(["a", "a"], [1, 2], [0.5, 0.4], [np.nan, 0.3])
    tab = sim.CurveTable(jnp.array([[0.9, 0.5], [0.8, 0.3]]), test=jnp.array([[0.9, jnp.inf], [0.8, 0.3]]))
    with pytest.raises(ValueError, match="table.test has 1 non-finite"):
        sim.run(policies.random_search(2, max_budget=2), tab, jax.random.key(0))
    # epochs beyond any valid table are named as given, not as a cast to int64 wrapped them
    for epoch, shown in ((np.array([2**63 + 1], np.uint64), "9223372036854775809"), ([1e20], "1" + "0" * 20)):
        with pytest.raises(ValueError, match=rf"epoch {shown} is beyond the number of records \(1\)"):
            sim.CurveTable.from_long(["a"], epoch, [0.5])


def test_from_long_names_losses_beyond_float32_as_such():
    # without x64 a finite float64 loss of 1e39 becomes inf in the float32 table: it was
    # reported as "not finite (NaN or inf) ... leave such records out", about a finite record
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match=r"value holds 1 value\(s\) beyond the range of float32, the first "
                                             r"-1e\+39 at record 2: .*jax_enable_x64"):
            sim.CurveTable.from_long(["a", "a", "b"], [1, 2, 1], np.array([0.5, 0.25, -1e39]))
        with pytest.raises(ValueError, match=r"test holds 1 value\(s\) beyond the range of float32"):
            sim.CurveTable.from_long(["a"], [1], [0.5], test=np.array([3.5e38]))
        # a NaN in the records is still named as one
        with pytest.raises(ValueError, match=r"not finite \(NaN or inf\), the first at record 1"):
            sim.CurveTable.from_long(["a", "a"], [1, 2], np.array([0.5, np.nan]))
    # with x64 the same records are a float64 table
    table = sim.CurveTable.from_long(["a", "a", "b"], [1, 2, 1], np.array([0.5, 0.25, -1e39]))
    assert table.values.dtype == jnp.float64 and float(table.values[1, 0]) == -1e39


def test_csv_labels_may_begin_with_a_hash(tmp_path):
    # NumPy's reader takes "#" for the start of a comment and dropped such records
    path = tmp_path / "t.csv"
    path.write_text("config,epoch,value\n#1,1,0.1\nb,1,0.5\n#1,2,0.05\n")
    table, labels = sim.CurveTable.from_csv(path, return_labels=True)
    assert list(labels) == ["#1", "b"]
    np.testing.assert_array_equal(np.asarray(table.values), [[0.1, 0.05], [0.5, np.nan]])


@pytest.mark.parametrize("ids", [
    [250, 3, 17], [4, 0, 2, 1, 3], [-5, 2**70, 7],          # integers: int64 (Python ints beyond it)
    [0.1, 0.25, 1.0], [1.0, 2.0], [2.5e-3, 1e300],            # floats as Python writes them
    ["007", "008", "7"], ["1", "1.0"], ["0", "-0"], ["1e3", "1000"], ["1_000", "5"], ["nan", "1"],
    [".e5", "1"], ["0x10", "2"],                              # not numbers Python's float reads
])
def test_csv_labels_come_back_as_written_rows_in_order_of_first_appearance(tmp_path, ids):
    # Ids read as numbers lost what told them apart: "007" came back as 7, "007" and "7" (or
    # "1" and "1.0", "0" and "-0", "1e3" and "1000", "1_000" and "1000") were one configuration,
    # its records merged into one curve (refused only if two had the same epoch). Oracle: the
    # ids as written (str of the Python value), row i the i-th id to appear in the file, the
    # records interleaved (epochs of different ids alternate) and ragged.
    rng = np.random.default_rng(len(ids))
    lengths = {i: 1 + k % 3 for k, i in enumerate(ids)}
    recs = [(k, e) for k in range(len(ids)) for e in range(1, lengths[ids[k]] + 1)]
    recs = [recs[j] for j in rng.permutation(len(recs))]
    loss = {(k, e): float(rng.uniform()) for k, e in recs}
    path = tmp_path / "ids.csv"
    path.write_text("config,epoch,value\n" + "".join(f"{ids[k]},{e},{loss[k, e]!r}\n" for k, e in recs))
    table, labels = sim.CurveTable.from_csv(path, return_labels=True)
    order = first_appearance([k for k, _ in recs])
    assert [type(x) for x in labels] == [type(ids[k]) for k in order] and labels == [ids[k] for k in order]
    want = np.full((len(ids), 3), np.nan)
    for (k, e), v in loss.items():
        want[order.index(k), e - 1] = v
    np.testing.assert_array_equal(np.asarray(table.values)[:, : want.shape[1]], want[:, : table.values.shape[1]])
    assert np.asarray(sim.curve_lengths(table)).tolist() == [lengths[ids[k]] for k in order]


def test_csv_records_with_empty_or_non_numeric_cells_are_refused(tmp_path):
    # NumPy's reader filled an empty integer cell with -1 and read an all-empty column as
    # False (0.0): a made-up configuration or loss, silently
    bad = {
        "config,epoch,value\n0,1,0.5\n,1,0.4\n": r"line 3: the record has no value in column 'config'",
        "config,epoch,value\n0,1,5\n0,2,\n1,1,3\n": r"line 3: the record has no value in column 'value'",
        "config,epoch,value\n0,1,\n0,2,\n": r"line 2: the record has no value in column 'value'",
        "config,epoch,value,test\n0,1,0.5,\n0,2,0.4,\n": r"line 2: the record has no value in column 'test'",
        "config,epoch,value\n0,1,5\n0,2\n": r"line 3: the record has no value in column 'value'",
        "config,epoch,value\n0,1,5\n0,2,x\n": r"line 3: column 'value' holds 'x', not a number",
        "config,epoch,value\n0,N/A,5\n": r"line 2: column 'epoch' holds 'N/A', not a number",
        "config,epoch,value,value\n0,1,5,6\n": r"the column 'value' more than once",
        # a non-finite loss is named by its line too (it was "record 1", counted from 0, no file)
        "config,epoch,value\n0,1,5\n0,2,nan\n1,1,inf\n": r"line 3: column 'value' holds 'nan', not a finite number "
                                                      r"\(2 such record\(s\)\): leave such records out",
        "config,epoch,value,test\n0,1,5,1e999\n": r"line 2: column 'test' holds '1e999', not a finite number",
    }
    for i, (text, message) in enumerate(bad.items()):
        path = tmp_path / f"bad{i}.csv"
        path.write_text(text)
        with pytest.raises(ValueError, match=message) as err:
            sim.CurveTable.from_csv(path)
        assert str(path) in str(err.value)


def test_csv_records_with_more_fields_than_the_header_are_refused(tmp_path):
    # an unquoted decimal comma splits "0,5" into two fields: the loss was read as 0.0 and
    # the rest dropped, silently
    path = tmp_path / "comma.csv"
    path.write_text("config,epoch,value\na,1,0,5\na,2,0,25\n")
    with pytest.raises(ValueError, match=r"line 2: the record has 4 fields but the header names 3") as err:
        sim.CurveTable.from_csv(path)
    assert str(path) in str(err.value)
    # empty fields past the header (a trailing comma, as some exporters write) are no data
    path.write_text("config,epoch,value\na,1,0.5,\na,2,0.25, ,\n")
    np.testing.assert_array_equal(np.asarray(sim.CurveTable.from_csv(path).values), [[0.5, 0.25]])


def test_csv_blank_lines_byte_order_mark_spaces_and_quotes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffconfig , epoch,value,note\n\n\"a,1\",1, 0.5,x\n b ,1,0.25,\n\n\"a,1\",2.0,0.125,\n"
                     .encode("utf-8"))
    table, labels = sim.CurveTable.from_csv(path, return_labels=True)
    assert list(labels) == ["a,1", "b"]
    np.testing.assert_array_equal(np.asarray(table.values), [[0.5, 0.125], [0.25, np.nan]])
    np.testing.assert_array_equal(np.asarray(table.mask), [[True, True], [True, False]])


def test_save_and_load_tables_exactly(tmp_path):
    values, test, mask, _ = ragged(2)
    configs = np.random.default_rng(0).uniform(size=(NUM, 3))
    full = sim.CurveTable(jnp.asarray(values), jnp.asarray(mask), jnp.asarray(test), jnp.asarray(configs))
    plain = sim.CurveTable(jnp.asarray(np.nan_to_num(values, nan=0.5), jnp.float32))
    for i, table in enumerate([full, plain]):
        path = tmp_path / f"t{i}.npz"
        table.save(path)
        back = sim.CurveTable.load(path)
        assert isinstance(back, sim.CurveTable)
        for field in sim.CurveTable._fields:
            a, b = getattr(back, field), getattr(table, field)
            if field == "mask" and b is None:    # saved as the all-valid mask
                b = np.ones(table.values.shape, bool)
            if b is None:
                assert a is None
            else:
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    jaxstop.save({"values": jnp.ones(3)}, tmp_path / "other.npz")
    with pytest.raises(ValueError, match="not a CurveTable"):
        sim.CurveTable.load(tmp_path / "other.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(ValueError, match="not a CurveTable"):
        sim.CurveTable.load(tmp_path / "junk.npz")
    (tmp_path / "a_directory.npz").mkdir()
    with pytest.raises(ValueError, match="not a CurveTable"):
        sim.CurveTable.load(tmp_path / "a_directory.npz")
    with pytest.raises(FileNotFoundError):
        sim.CurveTable.load(tmp_path / "missing.npz")


def test_load_restores_into_shape_dtype_struct_leaves(tmp_path):
    policy = policies.random_search(4, max_budget=3)
    key = jax.random.key(2)
    tree = {"state": policy.init(key), "keys": jax.random.split(key, 3), "x": jnp.linspace(0.0, 1.0, 5)}
    jaxstop.save(tree, tmp_path / "tr.npz")
    like = jax.eval_shape(lambda k: {"state": policy.init(k), "keys": jax.random.split(k, 3),
                                     "x": jnp.zeros(5)}, jax.random.key(0))
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree_util.tree_leaves(like))
    back = jaxstop.load(tmp_path / "tr.npz", like=like)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(tree)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree)):
        assert isinstance(a, jax.Array) and a.dtype == b.dtype and a.shape == b.shape
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # a shape or dtype that differs from the file is refused, naming the leaf
    for wrong in [jax.ShapeDtypeStruct((4,), like["keys"].dtype), jax.ShapeDtypeStruct((3,), jnp.uint32)]:
        with pytest.raises(ValueError, match=r"\['keys'\]"):
            jaxstop.load(tmp_path / "tr.npz", like={**like, "keys": wrong})


def test_cli_default_max_budget_is_the_longest_curve(tmp_path, capsys):
    # a saved table wider than every curve in it (a padded column no curve reaches): the
    # default --max-budget was the table's width, not its longest curve as --help says
    values, test, mask, lengths = ragged(5)
    keep = np.flatnonzero(lengths < T)   # curves of up to T - 1 epochs in a table T wide
    table = sim.CurveTable(jnp.asarray(values[keep]), jnp.asarray(mask[keep]))
    path = tmp_path / "narrow.npz"
    table.save(path)
    out = tmp_path / "study.npz"
    assert sim.cli(["--table", str(path), "--policy", "sh", "--eta", "2", "--runs", "2", "--out", str(out),
                    "--no-progress", "--dtype", "float64"]) == 0
    longest = int(lengths[keep].max())
    assert f"curves of up to {longest} epochs" in capsys.readouterr().out
    policy = policies.sh(keep.size, longest, eta=2, dtype=jnp.float64)
    ref = sim.run_many(policy, table, jax.random.key(0), 2, progress=False)
    back = jaxstop.load(out, like={"summary": sim.summarize(ref, table), "traces": ref})
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(jax.tree_util.tree_leaves(back["traces"]),
                                                                    jax.tree_util.tree_leaves(ref)))


def test_cli_writes_the_traces_of_run_many_and_a_summary(tmp_path):
    values, test, mask, _ = ragged(3)
    labels = [f"cfg-{c}" for c in "qwertyu"]
    config, epoch, value, tst, _ = records(values, test, mask, labels, np.random.default_rng(4))
    csv = tmp_path / "curves.csv"
    lines = ["config,epoch,value,test"] + [f"{c},{e},{float(v)!r},{float(t)!r}"
                                           for c, e, v, t in zip(config, epoch, value, tst)]
    csv.write_text("\n".join(lines) + "\n")
    out, ckpt = tmp_path / "study.npz", tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "jaxstop", "simulate", "--table", str(csv), "--policy", "subsampling",
           "--eta", "2", "--total-budget", "20", "--runs", "4", "--seed", "5", "--chunk-size", "2",
           "--dtype", "float64", "--checkpoint", str(ckpt), "--out", str(out), "--no-progress", "--record", "jobs"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "final regret (percentage points)" in done.stdout and "budget spent (epochs)" in done.stdout
    assert sorted(p.name for p in ckpt.iterdir()) == ["chunk_000000.npz", "chunk_000001.npz", "manifest.json"]
    # the same study in this process (float64, as the test session)
    table = sim.CurveTable.from_long(config, epoch, value, tst)
    policy = policies.subsampling(NUM, T, eta=2, budget=20, dtype=jnp.float64)
    ref = sim.run_many(policy, table, jax.random.key(5), 4, chunk_size=2, progress=False, record="jobs")
    assert ref.infos is None
    summary = sim.summarize(ref, table)
    back = jaxstop.load(out, like={"summary": summary, "traces": ref})
    with np.load(out) as z:  # written compact (format version 3)
        assert int(z["__version__"]) == 3 and "__encoding__" in z.files
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves({"summary": summary, "traces": ref})):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the printed mean final regret is the summary's, in percentage points
    row = next(line for line in done.stdout.splitlines() if line.startswith("final regret"))
    assert float(row.split()[-5]) == pytest.approx(100 * float(summary.mean.final_regret), rel=1e-3, abs=1e-9)


OPTIONS = ["--table", "--policy", "--runs", "--seed", "--out", "--checkpoint", "--chunk-size", "--max-jobs",
           "--max-budget", "--dtype", "--grid-points", "--no-progress", "--record", "--uq", "--eta", "--min-budget",
           "--window", "--num-start", "--keep-rule", "--delta-estimate", "--num-profile", "--num-samples",
           "--total-budget", "--step", "--replace", "--max-evals", "--num-init", "--n0", "--num-paths",
           "--threshold", "--acquisition", "--min-iterations"]


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for option in OPTIONS:
        assert f"  {option}" in text, option
    for name in ["sh", "hyperband", "bohb", "subsampling", "random_search", "bo_bos", "gp_ucb",
                 "auto_termination_bo", "alexnet", ".csv"]:
        assert name in text
    # every option the parser knows is in the list above, and each has its own help text
    parser = build_parser()
    flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    assert flags == set(OPTIONS)
    assert all(a.help for a in parser._actions)
    assert main(["--help"]) == 0 and "simulate" in capsys.readouterr().out


def test_bad_input_gives_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--table", "alexnet", "--policy", "asha", "--out", "x.npz"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --policy: invalid choice: 'asha'" in err and "random_search" in err
    with pytest.raises(SystemExit):
        main(["simulate", "--table", "alexnet", "--policy", "random_search", "--uq", "--out", "x.npz"])
    assert "--uq does not apply to --policy random_search" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a UQ setting without --uq once ran plain SH silently
        main(["simulate", "--table", "alexnet", "--policy", "sh", "--keep-rule", "crossing", "--out", "x.npz"])
    assert "--keep-rule applies with --uq only" in capsys.readouterr().err
    csv = tmp_path / "c.csv"
    csv.write_text("config,epoch,value\na,1,0.5\na,2,0.4\nb,1,0.6\n")
    assert main(["simulate", "--table", str(csv), "--policy", "gp_ucb", "--out", str(tmp_path / "o.npz")]) == 2
    assert "--policy gp_ucb needs configuration vectors" in capsys.readouterr().err
    assert main(["simulate", "--table", str(tmp_path / "none.csv"), "--policy", "sh", "--out", "o.npz"]) == 2
    assert "no such file" in capsys.readouterr().err
    csv.write_text("cfg,epoch,loss\na,1,0.5\n")
    assert main(["simulate", "--table", str(csv), "--policy", "sh", "--out", "o.npz"]) == 2
    assert "missing ['config', 'value']" in capsys.readouterr().err
    for text in ("", "config,epoch,value\n"):        # no record: said plainly, not a parser's index error
        csv.write_text(text)
        assert main(["simulate", "--table", str(csv), "--policy", "sh", "--out", "o.npz"]) == 2
        assert "needs a header line (config,epoch,value) and at least one record" in capsys.readouterr().err
    csv.write_bytes(b"\xff\xfe\x00binary")
    assert main(["simulate", "--table", str(csv), "--policy", "sh", "--out", "o.npz"]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err
    assert main(["simulate", "--table", "alexnet", "--policy", "auto_termination_bo", "--out", "o.npz"]) == 2
    assert "needs --threshold" in capsys.readouterr().err
    assert main(["bench"]) == 2 and "unknown command 'bench'" in capsys.readouterr().err
    # a policy's own argument errors name the flag
    assert main(["simulate", "--table", "alexnet", "--policy", "gp_ucb", "--max-evals", "0", "--out", "o.npz"]) == 2
    assert "error: --max-evals must be >= 1, got 0" in capsys.readouterr().err
    assert main(["simulate", "--table", "alexnet", "--policy", "random_search", "--replace", "--out", "o.npz"]) == 2
    assert "error: --max-jobs is required" in capsys.readouterr().err
    # subsampling's argument `budget` is the flag --total-budget
    assert main(["simulate", "--table", "alexnet", "--policy", "subsampling", "--total-budget", "0",
                 "--out", "o.npz"]) == 2
    assert "error: --total-budget must be >= 1, got 0" in capsys.readouterr().err
    # checked before any run (an unwritable --out once failed after the whole study)
    (tmp_path / "a_file").write_text("x")
    for extra, message in ((["--out", str(tmp_path / "no" / "x.npz")], "the directory"),
                           (["--out", str(tmp_path)], "is a directory"),
                           (["--out", "o.npz", "--checkpoint", str(tmp_path / "a_file")], "is not a directory"),
                           (["--out", "o.npz", "--seed", str(2**70)], "--seed must be a 64-bit signed integer")):
        with pytest.raises(SystemExit) as exit_:
            main(["simulate", "--table", "alexnet", "--policy", "sh"] + extra)
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_cli_in_float64_leaves_the_callers_x64_setting(tmp_path):
    """sim.cli([..., "--dtype", "float64"]) runs in x64 mode for the call only: the
    calling process (here a fresh one with x64 off) keeps its setting; the traces are float64."""
    out = tmp_path / "o.npz"
    script = textwrap.dedent(f"""
        import jax, numpy as np
        from jaxstop import sim
        rc = sim.cli(["--table", "alexnet", "--policy", "random_search", "--runs", "2", "--dtype", "float64",
                      "--out", {str(out)!r}, "--no-progress"])
        with np.load({str(out)!r}) as z:
            dtypes = sorted({{str(z[k].dtype) for k in z.files if z[k].dtype.kind == "f"}})
        print(rc, jax.config.jax_enable_x64, dtypes)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "0 False ['float64']"


def test_cli_auto_termination_on_a_table_of_fewer_rows_than_its_default_num_init(tmp_path):
    # 7 rows: the default --max-evals is 7, below the policy's default num_init of 10, and the
    # command failed with "--num-init (10) must be <= max_evals (7)" for a flag never given
    values, test, mask, _ = ragged(6)
    configs = np.random.default_rng(6).uniform(size=(NUM, 2))
    table = sim.CurveTable(jnp.asarray(values), jnp.asarray(mask), jnp.asarray(test), jnp.asarray(configs))
    path, out = tmp_path / "t.npz", tmp_path / "o.npz"
    table.save(path)
    assert sim.cli(["--table", str(path), "--policy", "auto_termination_bo", "--threshold", "0.01", "--runs", "2",
                    "--out", str(out), "--no-progress", "--dtype", "float64"]) == 0
    # the study of the policy with num_init = max_evals = 7 (every evaluation random)
    policy = policies.auto_termination_bo(NUM, max_budget=T, max_evals=NUM, candidates=table.configs,
                                          threshold=0.01, num_init=NUM)
    ref = sim.run_many(policy, table, jax.random.key(0), 2, progress=False)
    back = jaxstop.load(out, like={"summary": sim.summarize(ref, table), "traces": ref})
    for a, b in zip(jax.tree_util.tree_leaves(back["traces"]), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # a --max-evals below the default num_init works too; a --num-init above it is refused by name
    assert sim.cli(["--table", str(path), "--policy", "auto_termination_bo", "--threshold", "0.01", "--runs", "2",
                    "--max-evals", "3", "--out", str(out), "--no-progress", "--dtype", "float64"]) == 0
    assert sim.cli(["--table", str(path), "--policy", "auto_termination_bo", "--threshold", "0.01", "--runs", "2",
                    "--max-evals", "3", "--num-init", "4", "--out", str(out), "--no-progress"]) == 2


def test_cli_reports_how_often_the_termination_criterion_fired(tmp_path, capsys):
    # "terminated by the policy" also counts auto_termination_bo studies that ended at
    # --max-evals; the command prints apart the share its regret-bound rule stopped. A
    # threshold of 0 is never crossed (the bound is >= 0 and the rule is strict), so no study
    # stops by it although every one terminates; a threshold far above any bound stops each
    # study once it has --min-iterations evaluations, before --max-evals (7 rows).
    values, test, mask, _ = ragged(6)
    configs = np.random.default_rng(6).uniform(size=(NUM, 2))
    path, out = tmp_path / "t.npz", tmp_path / "o.npz"
    sim.CurveTable(jnp.asarray(values), jnp.asarray(mask), jnp.asarray(test), jnp.asarray(configs)).save(path)
    shares = {}
    for threshold in ("0", "1e9"):
        assert sim.cli(["--table", str(path), "--policy", "auto_termination_bo", "--threshold", threshold,
                        "--num-init", "2", "--min-iterations", "3", "--runs", "3", "--out", str(out),
                        "--no-progress"]) == 0
        lines = capsys.readouterr().out.splitlines()
        terminated = next(ln for ln in lines if ln.startswith("terminated by the policy"))
        assert float(terminated.split()[-5]) == 1.0
        shares[threshold] = next(ln for ln in lines if ln.startswith("stopped by the regret-bound criterion"))
    assert shares["0"].endswith(": 0% of runs") and shares["1e9"].endswith(": 100% of runs")
    # policies without a criterion print no such line
    assert sim.cli(["--table", str(path), "--policy", "sh", "--runs", "2", "--out", str(out), "--no-progress"]) == 0
    assert "criterion" not in capsys.readouterr().out


def test_cli_seeds_beyond_32_bits_and_negative_seeds_are_their_own_keys(tmp_path, capsys):
    # Without x64 (as --dtype float32 runs) jax.random.key kept a seed's low 32 bits: --seed
    # 4294967296 ran the study of --seed 0, and --seed -1 drew other runs than with --dtype
    # float64. The key is now JAX's key of the 64-bit seed in both modes. Oracle: threefry's
    # key data for a 64-bit seed s is its two 32-bit halves (s >> 32, s & 0xffffffff).
    values, _, mask, _ = ragged(7)
    path = tmp_path / "t.npz"
    sim.CurveTable(jnp.asarray(values), jnp.asarray(mask)).save(path)
    with jax.enable_x64(False):
        table = sim.CurveTable.load(path)
        policy = policies.random_search(NUM, max_budget=T, dtype=jnp.float32)
        traces = {}
        for seed in (0, 2**32, -1, 2**63 - 1):
            out = tmp_path / f"o{seed}.npz"
            assert sim.cli(["--table", str(path), "--policy", "random_search", "--runs", "4", "--seed", str(seed),
                            "--out", str(out), "--no-progress"]) == 0
            halves = np.array([(seed >> 32) & 0xFFFFFFFF, seed & 0xFFFFFFFF], np.uint32)
            ref = sim.run_many(policy, table, jax.random.wrap_key_data(halves), 4, progress=False)
            back = jaxstop.load(out, like={"summary": sim.summarize(ref, table), "traces": ref})["traces"]
            for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(ref)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            traces[seed] = np.asarray(back.jobs.config)
    capsys.readouterr()
    assert not np.array_equal(traces[0], traces[2**32])


def test_cli_refuses_an_out_that_is_the_table_or_the_checkpoint(tmp_path, capsys):
    # --out naming the --table file replaced the user's table with the study's results; --out
    # naming --checkpoint failed only after the whole study (the checkpoint made it a directory)
    csv = tmp_path / "curves.csv"
    text = "config,epoch,value\na,1,0.5\na,2,0.4\nb,1,0.6\n"
    csv.write_text(text)
    for extra, message in ((["--out", str(csv)], "is the --table file"),
                           (["--out", str(tmp_path / "." / "curves.csv")], "is the --table file"),
                           (["--out", str(tmp_path / "s"), "--checkpoint", str(tmp_path / "s")], "the same path")):
        with pytest.raises(SystemExit) as exit_:
            main(["simulate", "--table", str(csv), "--policy", "random_search", "--runs", "2", "--no-progress"]
                 + extra)
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert csv.read_text() == text and not (tmp_path / "s").exists()
    # any other name (any suffix) is written as given
    assert main(["simulate", "--table", str(csv), "--policy", "random_search", "--runs", "2", "--no-progress",
                 "--out", str(tmp_path / "study.results")]) == 0
    with np.load(tmp_path / "study.results") as z:
        assert str(z["__format__"]) == "jaxstop.pytree"
