"""Read evaluation datasets (JSONL, docs/architecture.md#evaluation-semantics) into plain
:class:`ExampleSpec` values.

No Django here: the evaluation service calls :func:`parse_jsonl`, and only if it
returns writes the Dataset and Example rows. The whole file is validated before
anything is returned, so a bad line means nothing is written (docs/architecture.md#evaluation-semantics:
"a bad line is a clear error naming the line, and nothing is written").

Line format (one JSON object per line; layout of datasets/README.md):

=============== =========== ==================================================
field           required    rule
=============== =========== ==================================================
``question_id`` yes         non-empty string (an integer is accepted and
                            turned into its decimal string); unique in the file
``question``    yes         non-empty string
``answer``      yes         string kept as is (may be ``""``: the example is
                            then unscored) — one that merely looks like a
                            list (``"[[\"France\", 4]]"``, Spider) stays a
                            string; a JSON **array** is a list of aliases,
                            any of which is correct (``["Paris", "paris,
                            France"]``), each element kept as text (a
                            non-string element as its JSON text); any other
                            JSON value except ``null`` is stored as its JSON
                            text (``18`` → ``"18"``)
``task_type``   yes         non-empty string
``choices``     no          non-empty list of strings (``null`` = absent)
``context``     no          object (``null`` = absent); its
                            ``database_file``, if any, a non-empty relative
                            path that stays inside the dataset's folder once
                            resolved (symlinks included); ``database_path`` is
                            refused (it is derived from ``database_file``)
``scorer``      no          a name in :data:`evaluation.scoring.scorer_names.PURE_SCORER_NAMES`
                            (``null`` = absent)
``trajectory``  no          the expected tool calls and how they are matched,
and its kin                 with ``trajectory_match``, ``args_match``,
                            ``arg_rules``, ``trajectory_max_steps``,
                            ``trajectory_slack``: checked by
                            :mod:`evaluation.scoring.trajectory_spec`, kept in
                            the metadata
``split``       no          non-empty string: the example's split (``dev``,
                            ``test``...; ``run_eval --split``), kept in metadata
``tags``        no          list of non-empty strings (``run_eval --tag``),
                            kept in metadata
``turns``       no          a conversation example, instead of ``question``
                            and ``answer`` (so is ``simulated_user`` with
                            ``success``), checked by
                            :mod:`evaluation.datasets.conversation_spec`
anything else   no          kept in ``ExampleSpec.metadata`` (``gold_sql``,
                            ``result_rows``, ``ordered``, ``supporting_facts``,
                            ``hotpot_type``, ``level`` ...)
=============== =========== ==================================================

Before a line is checked, every string in it has NUL and lone UTF-16
surrogates replaced by U+FFFD, and NaN/±inf become ``null``
(``agentlab.agent.text.json_safe``): PostgreSQL cannot store them, and the
same file must give the same examples on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentlab.agent.plugins import PluginError, load_plugin
from agentlab.agent.text import json_safe
from evaluation.datasets.conversation_spec import (
    ConversationLineError,
    conversation_fields,
    is_conversation_line,
)
from evaluation.datasets.spec import SPLIT_KEY, TAGS_KEY, ExampleSpec, gold_answer, gold_display
from evaluation.scoring.plugin_scorers import plugin_scorers
from evaluation.scoring.scorer_names import PURE_SCORER_NAMES
from evaluation.scoring.trajectory_spec import (
    TRAJECTORY_FIELDS,
    TrajectoryFormatError,
    check_trajectory_fields,
)

__all__ = [
    "DatasetFormatError",
    "ExampleSpec",
    "gold_answer",
    "gold_display",
    "parse_jsonl",
    "parse_numbered",
    "parse_records",
]

_KNOWN_FIELDS = ("question_id", "question", "answer", "task_type", "choices", "context", "scorer", "plugins")


class DatasetFormatError(ValueError):
    """A dataset that cannot be read, with where: ``path``, 1-based ``line``
    (``None`` when the problem is the file as a whole) and ``message``.

    ``str(error)`` reads ``"gsm8k.jsonl, line 7: field 'question' is missing"``
    (the file's name, not its full path, which stays in ``path``)."""

    def __init__(self, message: str, *, path: str | Path, line: int | None = None) -> None:
        self.message = message
        self.path = str(path)
        self.line = line
        name = Path(self.path).name or self.path
        where = f"{name}, line {line}" if line is not None else name
        super().__init__(f"{where}: {message}")


def _fail(message: str, source: str, line: int | None) -> DatasetFormatError:
    return DatasetFormatError(message, path=source, line=line)


def _require_text(record: dict[str, Any], name: str, source: str, line: int | None) -> str:
    if name not in record or record[name] is None:
        raise _fail(f"field {name!r} is missing", source, line)
    value = record[name]
    if not isinstance(value, str):
        raise _fail(f"field {name!r} must be a string, got {_json_type(value)}", source, line)
    if not value.strip():
        raise _fail(f"field {name!r} is empty", source, line)
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _example_from_record(record: Any, *, source: str, line: int | None, base_dir: Path | None) -> ExampleSpec:
    """One line's example, each field checked; ``DatasetFormatError`` names
    the source, the line and the field."""
    if not isinstance(record, dict):
        raise _fail(f"expected a JSON object, got {_json_type(record)}", source, line)
    # NUL and lone surrogates (and NaN) no database here can store: U+FFFD
    # (None) on every string of the line, so both backends store the same bytes
    record = json_safe(record)
    external_id = _external_id(record.get("question_id"), source, line)
    if is_conversation_line(record):
        return _conversation_example(record, external_id, source=source, line=line, base_dir=base_dir)
    question = _require_text(record, "question", source, line)
    if "answer" not in record:
        raise _fail("field 'answer' is missing", source, line)
    if record["answer"] is None:  # null, or NaN (json_safe made it None)
        raise _fail("field 'answer' is null (or NaN): give the gold answer", source, line)
    if record["answer"] == []:
        raise _fail("field 'answer' is an empty list: give at least one accepted answer", source, line)
    answer = gold_answer(record["answer"])
    task_type = _require_text(record, "task_type", source, line)
    metadata = {key: value for key, value in record.items() if key not in _KNOWN_FIELDS}
    try:
        check_trajectory_fields(metadata)
    except TrajectoryFormatError as exc:
        raise _fail(str(exc), source, line) from None
    _subset_check(metadata, source, line)
    return ExampleSpec(
        external_id=external_id,
        question=question,
        answer=answer,
        task_type=task_type,
        scorer=_scorer(record.get("scorer"), source, line, plugins=record.get("plugins")),
        choices=_choices(record.get("choices"), source, line),
        context=_context(record.get("context"), source, line, base_dir),
        metadata=metadata,
        plugins=_plugins(record.get("plugins"), source, line),
    )


def _conversation_example(
    record: dict[str, Any], external_id: str, *, source: str, line: int | None, base_dir: Path | None
) -> ExampleSpec:
    """A conversation line's example (``evaluation.datasets.conversation_spec``):
    its conversation in the metadata, the other fields checked as usual."""
    try:
        fields = conversation_fields(record, pure_scorers=PURE_SCORER_NAMES)
    except ConversationLineError as exc:
        raise _fail(str(exc), source, line) from None
    task_type = _require_text(record, "task_type", source, line)
    metadata = {key: value for key, value in record.items() if key not in _KNOWN_FIELDS}
    paths = [name for name in TRAJECTORY_FIELDS if name in metadata]
    if paths:
        # a path is graded per turn, and a conversation's turns have none of their own
        raise _fail(f"a conversation line takes no trajectory fields ({', '.join(paths)})", source, line)
    metadata.update(fields.metadata)
    _subset_check(metadata, source, line)
    return ExampleSpec(
        external_id=external_id,
        question=fields.question,
        answer=fields.answer,
        task_type=task_type,
        scorer=_scorer(record.get("scorer"), source, line, plugins=record.get("plugins")),
        choices=_choices(record.get("choices"), source, line),
        context=_context(record.get("context"), source, line, base_dir),
        metadata=metadata,
        plugins=_plugins(record.get("plugins"), source, line),
    )


def _subset_check(metadata: dict[str, Any], source: str, line: int | None) -> None:
    """``split`` (a non-empty string) and ``tags`` (a list of non-empty
    strings), when present: what ``run_eval --split`` / ``--tag`` select on."""
    split = metadata.get(SPLIT_KEY)
    if split is not None and (not isinstance(split, str) or not split.strip()):
        got = "a blank string" if isinstance(split, str) else _json_type(split)
        raise _fail(f"field 'split' must be a non-empty string, got {got}", source, line)
    if SPLIT_KEY in metadata and split is None:
        del metadata[SPLIT_KEY]
    tags = metadata.get(TAGS_KEY)
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(t, str) and t.strip() for t in tags)
    ):
        raise _fail("field 'tags' must be a list of non-empty strings", source, line)
    if TAGS_KEY in metadata and tags is None:
        del metadata[TAGS_KEY]


def _external_id(raw_id: Any, source: str, line: int | None) -> str:
    """``question_id``: a non-empty string, or an integer (as its text)."""
    if raw_id is None:
        raise _fail("field 'question_id' is missing", source, line)
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        return str(raw_id)
    if isinstance(raw_id, str):
        if not raw_id.strip():
            raise _fail("field 'question_id' is empty", source, line)
        return raw_id
    message = f"field 'question_id' must be a string or an integer, got {_json_type(raw_id)}"
    raise _fail(message, source, line)


def _choices(choices: Any, source: str, line: int | None) -> list[str] | None:
    """``choices``: absent, or a non-empty list of strings."""
    if choices is None:
        return None
    if not isinstance(choices, list) or not choices:
        raise _fail("field 'choices' must be a non-empty list of strings", source, line)
    for i, option in enumerate(choices):
        if not isinstance(option, str):
            message = f"field 'choices' item {i} must be a string, got {_json_type(option)}"
            raise _fail(message, source, line)
    return list(choices)


def _context(context: Any, source: str, line: int | None, base_dir: Path | None) -> dict[str, Any] | None:
    """``context``: absent, or an object; its ``database_file`` is resolved
    inside the dataset's folder (``database_path``, ``database_root``)."""
    if context is None:
        return None
    if not isinstance(context, dict):
        raise _fail(f"field 'context' must be an object, got {_json_type(context)}", source, line)
    context = dict(context)
    for derived in ("database_path", "database_root"):
        if derived in context:
            # derived here from database_file; taken from input it would
            # point sql_query at any SQLite file, the application's own included
            message = f"field 'context.{derived}' is not allowed (give 'context.database_file')"
            raise _fail(message, source, line)
    database_file = context.get("database_file")
    if database_file is not None:
        context.update(_database_paths(database_file, source, line, base_dir))
    return context


def _database_paths(
    database_file: Any, source: str, line: int | None, base_dir: Path | None
) -> dict[str, str]:
    """``database_path`` and ``database_root`` of a relative ``database_file``
    that stays inside ``base_dir`` (none without a folder)."""
    if not isinstance(database_file, str) or not database_file.strip():
        raise _fail("field 'context.database_file' must be a non-empty string", source, line)
    if Path(database_file).is_absolute():
        message = f"field 'context.database_file' must be a relative path, got {database_file!r}"
        raise _fail(message, source, line)
    if base_dir is None:
        return {}
    folder = base_dir.resolve()
    database_path = (folder / database_file).resolve()
    if not database_path.is_relative_to(folder):
        message = f"field 'context.database_file' {database_file!r} is outside the dataset's folder"
        raise _fail(message, source, line)
    # sql_query checks again when it opens the file: a link put in the way
    # after the import must not lead out of the folder
    return {"database_path": str(database_path), "database_root": str(folder)}


def _scorer(scorer: Any, source: str, line: int | None, *, plugins: Any = None) -> str | None:
    """``scorer``: absent, or the name of a known scorer — a pure one, or a
    scorer of a plugin (``agentlab_scorers``) of ``AGENTLAB_PLUGINS`` or of
    the line's own ``plugins``; looked up only for a name that is not pure."""
    if scorer is None:
        return None
    if not isinstance(scorer, str):
        raise _fail(f"field 'scorer' must be a string, got {_json_type(scorer)}", source, line)
    if scorer in PURE_SCORER_NAMES:
        return scorer
    from django.conf import settings  # deferred: the format is read without Django too

    own = [p for p in plugins if isinstance(p, str)] if isinstance(plugins, list) else []
    try:
        extra = plugin_scorers([*settings.AGENTLAB_PLUGINS, *own], reserved=PURE_SCORER_NAMES)
    except PluginError as exc:
        raise _fail(
            f"field 'scorer' {scorer!r}: a plugin scorer does not load: {exc}", source, line
        ) from None
    if scorer not in extra:
        known = ", ".join(sorted(PURE_SCORER_NAMES | set(extra)))
        raise _fail(f"unknown scorer {scorer!r} (known: {known})", source, line)
    return scorer


def _plugins(value: Any, source: str, line: int | None) -> tuple[str, ...]:
    """A line's ``plugins``: installed plugin names (``load_plugin`` finds each)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _fail(f"field 'plugins' must be a list of plugin names, got {_json_type(value)}", source, line)
    for name in value:
        try:
            load_plugin(name.strip())
        except PluginError as exc:
            raise _fail(f"field 'plugins': {exc}", source, line) from None
    return tuple(dict.fromkeys(v.strip() for v in value))


def _check_duplicate(example: ExampleSpec, seen: dict[str, int], source: str, line: int) -> None:
    first = seen.get(example.external_id)
    if first is not None:
        raise _fail(f"duplicate question_id {example.external_id!r} (first on line {first})", source, line)
    seen[example.external_id] = line


def parse_records(
    records: Iterable[dict[str, Any]], *, source: str, base_dir: str | Path | None = None
) -> list[ExampleSpec]:
    """Validate already-decoded records (for example from an API upload) by the same rules.

    ``source`` names the input in errors; ``line`` in a raised
    :class:`DatasetFormatError` is the 1-based position of the record. With
    ``base_dir``, ``context.database_file`` is resolved against it into
    ``context["database_path"]`` and must stay inside it. Raises :class:`DatasetFormatError` on the first
    bad record, or when there are no records; returns nothing partial."""
    return parse_numbered(enumerate(records, start=1), source=source, base_dir=base_dir)


def parse_numbered(
    records: Iterable[tuple[int, dict[str, Any]]],
    *,
    source: str,
    base_dir: str | Path | None = None,
    empty: str = "no examples",
) -> list[ExampleSpec]:
    """``parse_records`` for ``(line, record)`` pairs whose line numbers are
    the input's own (a CSV file's, where a row may span lines), read lazily
    in order; ``empty`` is the error for no records."""
    base = Path(base_dir) if base_dir is not None else None
    examples: list[ExampleSpec] = []
    seen: dict[str, int] = {}
    for line, record in records:
        example = _example_from_record(record, source=source, line=line, base_dir=base)
        _check_duplicate(example, seen, source, line)
        examples.append(example)
    if not examples:
        raise _fail(empty, source, None)
    return examples


def parse_jsonl(path: str | Path) -> list[ExampleSpec]:
    """Read and validate a whole JSONL dataset file; return its examples in file order.

    The file is UTF-8 (a leading byte-order mark is allowed). Lines are split on
    ``\\n`` only (``\\r\\n`` works too) — not ``str.splitlines``, which would also
    split on U+2028 inside a JSON string. Blank lines are skipped but still
    counted, so line numbers match an editor's.

    ``context.database_file`` is resolved against the file's folder into an
    absolute ``context["database_path"]``; a missing database file is *not* an
    error here (the SQL tool reports it when used), but an absolute
    ``database_file``, one that resolves (symlinks followed) outside the file's
    folder, and a ``context.database_path`` given in the line are: the SQL tool
    would read whatever file they name.

    Raises :class:`DatasetFormatError` (a ``ValueError``) naming the file and the
    1-based line for: a file that cannot be read, bytes that are not UTF-8, a line
    that is not JSON or not an object, a missing or ill-typed field, a database
    file outside the folder, an unknown scorer, bad trajectory fields, a duplicate
    ``question_id``; and, with ``line=None``, a file with no examples. Nothing is
    returned unless the whole file is valid."""
    path = Path(path)
    source = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _fail(f"cannot read the file: {exc.strerror or exc}", source, None) from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    base_dir = path.resolve().parent

    examples: list[ExampleSpec] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(f"not valid UTF-8 (byte {exc.start + 1} of the line)", source, number) from exc
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(f"not valid JSON: {exc.msg} (column {exc.colno})", source, number) from exc
        example = _example_from_record(record, source=source, line=number, base_dir=base_dir)
        _check_duplicate(example, seen, source, number)
        examples.append(example)
    if not examples:
        raise _fail("no examples (the file is empty)", source, None)
    return examples
