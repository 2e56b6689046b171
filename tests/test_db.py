import pytest
from hypothesis import given
from hypothesis import strategies as st

from tau_env.db import EpisodeDB, Schema, build_image, diff_rows
from tau_env.error import DomainError

DDL = """
CREATE TABLE a (id TEXT PRIMARY KEY, v INTEGER, f REAL) STRICT;
CREATE TABLE b (x INTEGER, y TEXT, PRIMARY KEY (x, y)) STRICT;
CREATE TABLE c (note ANY);
"""


@pytest.fixture
def schema():
    return Schema.from_ddl(DDL)


def test_schema_reads_tables_and_keys(schema):
    assert set(schema.tables) == {"a", "b", "c"}
    assert schema.tables["b"].primary_key == ("x", "y")
    assert schema.tables["c"].primary_key == ()
    with pytest.raises(DomainError, match="Unknown table 'aa'.*Did you mean \"a\""):
        schema.table("aa")
    with pytest.raises(DomainError, match="not valid SQL"):
        Schema.from_ddl("CREATE TABLE (")
    with pytest.raises(DomainError, match="reserved"):
        Schema.from_ddl("CREATE TABLE _tau_x (a INTEGER)")


def test_patch_upserts_and_deletes(schema):
    img = build_image(
        schema,
        {"a": [{"id": "k", "v": 1, "f": 1.5}, {"id": "z", "v": 2, "f": None}]},
        {"a": [{"id": "k", "v": 9, "f": 0.0}, {"id": "z", "_delete": True}]},
    )
    db = EpisodeDB(schema, img)
    assert db.dump()["a"] == [{"id": "k", "v": 9, "f": 0.0}]
    assert db.table_digests() == db.recompute_digests()


@pytest.mark.parametrize(
    "patch,match",
    [
        ({"nope": [{}]}, "Unknown table"),
        ({"a": [{"id": "k", "vv": 1}]}, "no column 'vv'.*Did you mean \"v\""),
        ({"a": ["row"]}, "must be objects"),
        ({"a": [{"id": "k", "v": "text"}]}, "does not fit table 'a'"),
        ({"b": [{"x": 1, "_delete": True}]}, "needs the primary key"),
    ],
)
def test_patch_errors_are_clear(schema, patch, match):
    with pytest.raises(DomainError, match=match):
        build_image(schema, {}, patch)


def test_digest_distinguishes_int_and_float():
    s = Schema.from_ddl("CREATE TABLE t (k INTEGER PRIMARY KEY, v)")
    d1 = EpisodeDB(s, build_image(s, {"t": [{"k": 1, "v": 1}]})).digest()
    d2 = EpisodeDB(s, build_image(s, {"t": [{"k": 1, "v": 1.0}]})).digest()
    d3 = EpisodeDB(s, build_image(s, {"t": [{"k": 1, "v": "1"}]})).digest()
    assert len({d1, d2, d3}) == 3


def test_digest_ignores_insertion_order(schema):
    rows = [{"id": str(i), "v": i, "f": None} for i in range(5)]
    d1 = EpisodeDB(schema, build_image(schema, {"a": rows})).digest()
    d2 = EpisodeDB(schema, build_image(schema, {"a": rows[::-1]})).digest()
    assert d1 == d2


def test_savepoint_rolls_back_digests_too(schema):
    db = EpisodeDB(schema, build_image(schema, {}))
    before = db.table_digests()
    with pytest.raises(RuntimeError, match="^the block failed$"):  # the block's own error, unchanged
        with db.savepoint():
            db.conn.execute("INSERT INTO a VALUES ('x', 1, 1.0)")
            raise RuntimeError("the block failed")
    assert db.table_digests() == before
    with db.savepoint():
        db.conn.execute("INSERT INTO b VALUES (1, 'q')")
    after = db.table_digests()
    assert after["b"] != before["b"] and after["a"] == before["a"]
    db.conn.execute("DELETE FROM b")
    assert db.table_digests() == before  # back to the same rows, back to the same digest


def test_snapshot_restore_forks(schema):
    db = EpisodeDB(schema, build_image(schema, {}))
    db.conn.execute("INSERT INTO a VALUES ('x', 1, 1.0)")
    snap = db.snapshot()
    db.conn.execute("DELETE FROM a")
    other = EpisodeDB(schema, snap)
    assert other.dump()["a"] == [{"id": "x", "v": 1, "f": 1.0}]
    db.restore(snap)
    assert db.digest() == other.digest() == EpisodeDB(schema, db.snapshot()).digest()


def test_start_rolls_back_to_the_base_and_applies_init(schema):
    base = build_image(schema, {"a": [{"id": "k", "v": 1, "f": None}]})
    db = EpisodeDB(schema)
    init = lambda conn: conn.execute("INSERT INTO a VALUES ('z', 2, 2.5)")  # noqa: E731
    db.start(base, init)
    first = db.digest()
    db.conn.execute("UPDATE a SET v = 99")
    db.start(base, init)  # the same base: a rollback, not a reload
    assert db.digest() == first and db.dump()["a"][1] == {"id": "z", "v": 2, "f": 2.5}
    db.snapshot()  # commits; the next start must reload the base
    db.conn.execute("DELETE FROM a")
    db.start(base)
    assert [r["id"] for r in db.dump()["a"]] == ["k"]
    assert db.table_digests() == db.recompute_digests()


def test_diff_rows_explains(schema):
    info = schema.tables["a"]
    d = diff_rows(info, [("k", 1, 1.0), ("extra", 0, None)], [("k", 2, 1.0), ("gone", 3, None)])
    assert d["changed_rows"] == {"k": {"v": {"expected": 2, "actual": 1}}}
    assert d["missing_rows"] == [{"id": "gone", "v": 3, "f": None}]
    assert d["unexpected_rows"] == [{"id": "extra", "v": 0, "f": None}]
    assert diff_rows(info, [("k", 1, 1.0)], [("k", 1.0, 1.0)])["changed_rows"]["k"]["v"] == {
        "expected": 1.0,
        "actual": 1,
    }


values = st.one_of(
    st.none(), st.integers(-(2**62), 2**62), st.floats(allow_nan=False), st.text(max_size=30), st.binary(max_size=10)
)


@given(st.lists(st.tuples(st.integers(0, 50), values), max_size=30, unique_by=lambda t: t[0]))
def test_roundtrip_and_digest_property(rows):
    s = Schema.from_ddl("CREATE TABLE t (k INTEGER PRIMARY KEY, v)")
    seed = {"t": [{"k": k, "v": v} for k, v in rows]}
    db = EpisodeDB(s, build_image(s, seed))
    dumped = db.dump()["t"]
    assert sorted(((r["k"], r["v"]) for r in dumped), key=lambda t: t[0]) == sorted(rows, key=lambda t: t[0])
    again = EpisodeDB(s, db.snapshot())
    assert again.digest() == db.digest()


ops = st.lists(
    st.tuples(st.sampled_from(["insert", "replace", "update", "delete", "fail"]), st.integers(0, 8), values),
    max_size=40,
)


@given(ops)
def test_incremental_digests_match_a_full_recompute(script):
    s = Schema.from_ddl("CREATE TABLE t (k INTEGER PRIMARY KEY, v)")
    db = EpisodeDB(s, build_image(s, {"t": [{"k": 1, "v": "x"}]}))
    for op, k, v in script:
        sql = {
            "insert": "INSERT OR IGNORE INTO t VALUES (?, ?)",
            "replace": "INSERT OR REPLACE INTO t VALUES (?, ?)",
            "update": "UPDATE t SET v = ? WHERE k = ?",
            "delete": "DELETE FROM t WHERE k = ? OR ? IS NULL",
            "fail": "INSERT INTO t VALUES (?, ?)",
        }[op]
        args = (v, k) if op == "update" else (k, v)
        try:
            with db.savepoint():
                db.conn.execute(sql, args)
                if op == "fail":
                    raise RuntimeError("roll back")
        except RuntimeError:
            pass
        except Exception as e:  # e.g. a duplicate key on a plain INSERT
            assert "UNIQUE" in str(e)
    assert db.table_digests() == db.recompute_digests()
