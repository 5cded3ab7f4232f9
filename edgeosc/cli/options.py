"""The CLI's one config door: every field of the config dataclasses (edgeosc/config.py) as --config FILE
(TOML, one table per dataclass, the `edgeosc pipeline` format), repeatable --set SECTION.FIELD=VALUE and, for
the common ones, a flag generated from the field (type, default, choices, help from its comment); checked by
config.from_dict and the dataclasses' __post_init__."""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import re
import textwrap
import tokenize
import tomllib
import typing
from pathlib import Path

import click
from click.core import ParameterSource

from ..config import (ATTENTION_KINDS, DATASETS, FORMS, MODEL_SIZES, NORMALIZE_MODES, NOT_OSCILLATOR, PHASE_MAPS,
                      PHASE_READOUTS, POSITIVE_MAPS, QUANT_PRESETS, STREAM_AFTER, STREAM_LOSS, to_dict)
from ..pipeline import PipelineConfig, load_config


# values a field may take, where its dataclass names them (flags become click.Choice; --set values are checked)
CHOICES = {"data.dataset": DATASETS, "data.task": ("12", "all", "digits"), "model.attention": ATTENTION_KINDS,
           "model.size": MODEL_SIZES, "model.positive": POSITIVE_MAPS, "model.form": FORMS,
           "model.anchors": ("projected", "tied"), "model.phase_map": PHASE_MAPS, "model.phase_readout": PHASE_READOUTS,
           "features.normalize": NORMALIZE_MODES, "train.device": ("auto", "cpu", "cuda"),
           "train.stream_after": STREAM_AFTER, "train.stream_loss": STREAM_LOSS,
           "quant.preset": QUANT_PRESETS}


@functools.cache
def field_comments(cls) -> dict[str, str]:
    """Field name -> its comment in the dataclass source (trailing, or the comment line just above)."""
    src = textwrap.dedent(inspect.getsource(cls))
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(src).readline) if tok.type == tokenize.COMMENT}
    lines = src.splitlines()
    out = {}
    for node in ast.parse(src).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above = node.lineno - 1
            own = comments.get(node.lineno)
            if own is None and above in comments and lines[above - 1].lstrip().startswith("#"):
                own = comments[above]
            if own:
                out[node.target.id] = own
    return out


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field, found by its dotted key from the top of PipelineConfig."""
    key: str
    owner: type  # the dataclass holding it
    name: str
    hint: object  # its resolved type annotation
    default: object

    @property
    def base(self) -> type:
        """The scalar type (str, int, float, bool); for tuples, their items' type."""
        args = [a for a in typing.get_args(self.hint) if a is not type(None) and a is not Ellipsis]
        if typing.get_origin(self.hint) is tuple:
            return args[0]
        return args[0] if args else self.hint

    @property
    def is_tuple(self) -> bool:
        return typing.get_origin(self.hint) is tuple

    @property
    def choices(self):
        return CHOICES.get(re.sub(r"^qat\.", "train.", self.key))  # [qat] is a TrainConfig too

    @property
    def comment(self) -> str:
        return field_comments(self.owner).get(self.name, "")

    def coerce(self, value):
        """A value from the command line (flag text or TOML) as the field's type where it is unambiguous: text for
        text fields (--set data.task=12), comma-separated text for tuples of text; from_dict checks the rest."""
        if self.base is str and not self.is_tuple and not isinstance(value, str) and not isinstance(value, list):
            return str(value).lower() if isinstance(value, bool) else str(value)
        if self.is_tuple and isinstance(value, str):
            return [x.strip() for x in value.split(",") if x.strip()] if self.base is str else value
        return value


def sections(cls=PipelineConfig) -> dict[str, object]:
    """Top-level names of PipelineConfig -> their dataclass (or, for a plain field such as `kinds`, None)."""
    return {f.name: _default(f) if dataclasses.is_dataclass(_default(f)) else None for f in dataclasses.fields(cls)}


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def find_field(key: str) -> Field:
    """The field a dotted key names ("train.augment.noise_prob"), its default PipelineConfig()'s value (the pipeline's
    defaults, which may differ from a section class's own); ValueError naming what exists."""
    cls, parts, inst = PipelineConfig, key.split("."), PipelineConfig()
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        where = ".".join(parts[:i]) or "the top level"
        if part not in fields:
            raise ValueError(f"{key}: no field {part!r} in {where} (it has {', '.join(fields)})")
        default = getattr(inst, part)
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(default):
                raise ValueError(f"{key} is a table: set its fields ({', '.join(f.name for f in dataclasses.fields(default))})")
            return Field(key, cls, part, typing.get_type_hints(cls)[part], default)
        if not dataclasses.is_dataclass(default):
            raise ValueError(f"{key}: {'.'.join(parts[:i + 1])} is a value, not a table")
        cls, inst = type(default), default
    raise ValueError(f"{key!r}: expected SECTION.FIELD")


def parse_setting(item: str) -> tuple[str, object]:
    """`SECTION.FIELD=VALUE` -> (key, value): VALUE parsed as TOML, a bare word as text."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(f"{item!r}: expected SECTION.FIELD=VALUE", param_hint="--set")
    try:
        return key.strip(), tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value  # a bare word: a string


class Settings:
    """What one command line sets: a TOML file, flags and --set overrides, each remembered with how it was given."""

    def __init__(self, path, allowed: tuple[str, ...]):
        self.path, self.allowed = path, allowed
        self.overrides: dict[str, object] = {}
        self.given_as: dict[str, str] = {}

    def add(self, key: str, value, given_as: str, hint: str = "--set") -> None:
        if key.split(".")[0] not in self.allowed:
            raise click.BadParameter(f"{given_as.removeprefix('--set ')}: unknown section {key.split('.')[0]!r}; this command takes "
                                     f"{', '.join(self.allowed)}", param_hint=hint)
        try:
            field = find_field(key)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint=hint) from None
        value = field.coerce(value)
        if field.choices and value not in field.choices:
            raise click.BadParameter(f"{given_as.removeprefix('--set ')}: must be one of {', '.join(field.choices)}", param_hint=hint)
        self.overrides[key] = value
        self.given_as[key] = given_as

    def file_tables(self) -> dict:
        if self.path is None:
            return {}
        try:
            return tomllib.loads(Path(self.path).read_text())
        except (OSError, tomllib.TOMLDecodeError):
            return {}  # load_config reports it

    def given(self, section: str) -> list[str]:
        """The fields of `section` this command line sets (in the file's table or by a flag / --set)."""
        table = self.file_tables().get(section, {})
        return list(dict.fromkeys([*(table if isinstance(table, dict) else {}),
                                   *(k.split(".")[1] for k in self.overrides if k.split(".")[0] == section)]))

    def describe(self, section: str) -> list[str]:
        """How each setting of `section` was given (for error messages)."""
        file = [f"[{section}] in {self.path}"] if section in self.file_tables() else []
        return file + [self.given_as[k] for k in self.overrides if k.split(".")[0] == section]

    def load(self, rename: dict[str, str] | None = None, base: dict | None = None) -> PipelineConfig:
        """Defaults < `base` ({section: config}, for fields not given; a given data.dataset starts afresh) <
        the file < flags and --set, through pipeline.load_config; any error is a click error naming its source."""
        overrides = {}
        for section, cfg in (base or {}).items():
            given = self.given(section)
            if section == "data" and "dataset" in given:
                continue  # another dataset: none of the old one's settings apply
            overrides.update({f"{section}.{k}": v for k, v in to_dict(cfg).items() if k not in given})
        for key, value in self.overrides.items():
            section, _, rest = key.partition(".")
            overrides[f"{(rename or {}).get(section, section)}.{rest}" if rest else key] = value
        try:
            cfg = load_config(self.path, overrides)
        except ValueError as e:
            msg = re.sub(r"^pipeline config: ", "", str(e))
            named = [g for k, g in self.given_as.items() if re.search(rf"\b{re.escape(k.split('.')[-1])}\b", msg)]
            raise click.ClickException(msg + (f" (given: {', '.join(named)})" if named else "")) from None
        for name in NOT_OSCILLATOR:  # another kind drops them (ModelConfig); given on this line, they are a mistake
            given = self.given_as.get(f"model.{name}")
            if given and cfg.model.attention != "oscillator":
                raise click.ClickException(f"{given}: {name} is an oscillator setting (attention is "
                                           f"{cfg.model.attention})")
        if cfg.data.data_dir and not Path(cfg.data.data_dir).is_dir():
            raise click.ClickException(f"{self.given_as.get('data.data_dir', 'data.data_dir')}: no such folder")
        for name in ("train", "qat"):  # recorded paths: absolute
            run = getattr(cfg, name)
            for key in ("init_from", "distill_from"):
                if getattr(run, key):
                    run = dataclasses.replace(run, **{key: str(Path(getattr(run, key)).expanduser().resolve())})
                    cfg = dataclasses.replace(cfg, **{name: run})
        return cfg


def to_toml(cfg, names) -> str:
    """The `names` tables of a PipelineConfig as TOML, each field with its comment (unset ones commented out)."""
    def table(title, obj, out):
        out.append(f"[{title}]")
        nested = []
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                nested.append((f"{title}.{f.name}", value))
                continue
            note = field_comments(type(obj)).get(f.name, "")
            line = f"{f.name} = {json.dumps(list(value) if isinstance(value, tuple) else value)}"
            line = f"# {f.name} = (unset)" if value is None else line
            out.append(f"{line}  # {note}" if note else line)
        for t, v in nested:
            out.append("")
            table(t, v, out)
    out = []
    for name in names:
        value = getattr(cfg, name)
        if dataclasses.is_dataclass(value):
            table(name, value, out)
            out.append("")
        else:
            out.insert(0, f"{name} = {json.dumps(list(value) if isinstance(value, tuple) else value)}")
    return "\n".join(out).rstrip() + "\n"


def config_options(allowed: tuple[str, ...], flags: list[tuple[str, str, str | None]], show=None, presets=(),
                   printable=True):
    """Give a command --config FILE, repeatable --set SECTION.FIELD=VALUE, --print-config and a flag per
    (flag, key, help) in `flags`, its type, default and choices taken from the config field (help: the given
    text, else the field's comment); `presets` are (flag, {key: value}, help): a flag that sets several fields
    (a --set of one of them wins); `printable`: offer --print-config. The command receives `settings` (a
    Settings) instead."""
    show = show or allowed
    first = find_field(flags[0][1]).default
    example = "model.dropout=0.2" if "model" in allowed else \
        f"{flags[0][1]}={first if isinstance(first, str) else json.dumps(first)}"
    made = []
    for flag, key, text in flags:
        field = find_field(key)
        dest = "cfg__" + key.replace(".", "__")
        help_ = (text or field.comment[:1].upper() + field.comment[1:]).rstrip(".") + f". [{key}]"
        kw = dict(help=help_, show_default=not (field.default is None or field.default is False or field.default == ()))
        if field.base is bool:  # --x / --no-x: either way from the default
            flag = f"{flag}/--no-{flag[2:]}"
            kw.update(is_flag=True, default=field.default, show_default=False)
        elif field.is_tuple and field.base is str:
            kw.update(default=",".join(field.default), metavar="A,B,...", show_default=bool(field.default))
            kw["help"] = kw["help"].replace(f". [{key}]", f" (comma-separated). [{key}]")
        elif field.is_tuple:
            kw.update(type=field.base, nargs=len(field.default), default=field.default)
        else:
            kind = click.Path() if field.base is str and field.default is None else field.base  # data_dir, init_from
            kw.update(type=click.Choice(field.choices) if field.choices else kind, default=field.default)
        made.append((dest, flag, key, click.option(flag, dest, **kw)))
    for flag, values, text in presets:
        for key in values:
            find_field(key)  # a typo here fails at import, not at the command line
        dest = "cfg__" + flag.strip("-").replace("-", "_")
        made.append((dest, flag, values, click.option(flag, dest, is_flag=True, help=text)))

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            ctx = click.get_current_context()
            settings = Settings(kw.pop("config_path"), allowed)
            for dest, flag, key, _ in made:
                value = kw.pop(dest)
                if ctx.get_parameter_source(dest) is not ParameterSource.DEFAULT and not isinstance(key, dict):
                    on, _, off = flag.partition("/")
                    given = on if value is True else off if value is False else f"{flag} {value}"
                    settings.add(key, value, given, hint=on)
            for item in kw.pop("settings"):
                key, value = parse_setting(item)
                settings.add(key, value, f"--set {item}")
            for dest, flag, values, _ in made:
                if isinstance(values, dict) and ctx.params.get(dest):
                    for key, value in values.items():
                        if key not in settings.overrides:
                            settings.add(key, value, flag, hint=flag)
            if kw.pop("print_config", False):
                click.echo(to_toml(settings.load(), show), nl=False)
                return None
            return fn(*args, settings=settings, **kw)

        opts = [click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
                             help=f"TOML file, one table per section ({', '.join(show)}), as `edgeosc pipeline` "
                                  "reads; flags and --set override it."),
                click.option("--set", "settings", multiple=True, metavar="SECTION.FIELD=VALUE",
                             help=f"Set any config field (edgeosc/config.py), e.g. --set {example} "
                                  "(value parsed as TOML; repeatable)." + (" --print-config lists them." * printable))]
        if printable:
            opts.append(click.option("--print-config", is_flag=True,
                                     help="Print the resulting config (every field, as TOML) and exit."))
        for opt in reversed(opts + [m[3] for m in made]):
            wrapper = opt(wrapper)
        return wrapper
    return deco
