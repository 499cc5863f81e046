"""Every command shown in README.md and docs/*.md names what exists: its launch.sh command,
its flags, the config and sweep files it names and the config fields it sets. A renamed flag,
command, file or field then fails here, not in a reader's terminal.

Which text is a command:
- in a fenced block whose language is bash, sh, shell, console or none: each line (lines
  ending in a backslash joined to the next), split at `|`, `;`, `&&` and `||`;
- outside fenced blocks: each inline code span;
and of these, each part that starts with `bash launch.sh` or `python -m experiments.X`
(after a `$ ` prompt, `VAR=value` assignments, `time`, `nohup`, `env` or `timeout N`).
`# comments` and redirections (`< test.src`, `> out.txt`, `2>&1`) are dropped. Python blocks
are not commands (tests/test_tutorial.py runs the tutorial's).

What is checked:
- `bash launch.sh CMD`: CMD is a branch of launch.sh's `case "$cmd"` (or its --help); no
  CMD, or a flag first, is the default command (`main`). The entry point a branch runs and
  the flags it fixes or fills from its first argument (`train CONFIG` -> `--config=CONFIG`,
  `sweep FILE` -> `--sweep=FILE`) are read from launch.sh itself.
- `python -m experiments.X`: experiments/X.py exists.
- every `--flag`, `--flag=value` and `--noflag` is a flag of that entry point: the flags its
  `--helpfull` lists (absl's own included), run as `python -m` runs it (flags defined under
  `if __name__ == '__main__'` count); launch.sh's own flags (`--coordinator HOST:PORT`,
  `--num-processes N`, `--process-id I`) count where the flag they become exists.
  `test` (pytest's flags) and `docs` (mkdocs') are not checked for flags.
- every file of the repository a command names (an argument or a flag's value under
  experiments/ or tests/) exists; a config file's `:arg` is accepted by its get_config(arg);
  a file given to `sweep` has a get_sweep(arg), and every `--only` pattern matches one of its
  variants; `tests/x.py::name` names a test function of that file.
- every `--config.a.b=value` names a field of the command's config (the file of its
  `--config`, positional CONFIG or launch.sh's default, loaded with its `:arg`), and is given
  to an entry point that has a `--config` flag.

Placeholders, which are not checked as files or names:
- upper-case words (`RUN`, `F`, `N`, `CONFIG`, `SWEEP_FILE`, `HOST:PORT`) and anything with
  `<...>` in it (`runs/<sweep>`); a CONFIG placeholder's `--config.a.b` is checked against
  the fields every config has (experiments/configs/common.base_config());
- `...` (something elided) and the brackets of an optional part: `[--beam=5]` is checked as
  `--beam=5`, `file.py[:reverse]` as both `file.py` and `file.py:reverse`;
- paths outside experiments/ and tests/ (`runs/X`, `/tmp/smoke`, `test.src`): outputs or
  the reader's own files, which need not exist.
Flag values are not checked, except the files and `--only` patterns above."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import glob
import importlib
import importlib.util
import os
import re
import shlex

from helpers import ROOT, run_modules

LAUNCH = os.path.join(ROOT, 'launch.sh')
SHELL_LANGUAGES = ('', 'bash', 'sh', 'shell', 'console')
PREFIXES = ('time', 'nohup', 'env', 'exec')    # words before a command; `timeout N` too
HELP_WORDS = ('--help', '-h', 'help')         # launch.sh's own help (its first case)
PLACEHOLDER = 'PLACEHOLDER'                    # what `<...>` becomes before tokenizing


@dataclasses.dataclass
class Command:
  where: str            # 'docs/x.md:12'
  words: list[str]      # the command's words, from `bash` or `python`
  text: str             # as written


@dataclasses.dataclass
class Branch:
  """One branch of launch.sh's `case "$cmd"`: the entry point it runs and its flags."""
  module: str | None    # experiments.X, or None (pytest, mkdocs)
  fixed: dict[str, str]            # flags the branch sets: {'config': 'experiments/...'}
  positional: str | None = None    # the flag its first argument becomes ('config', 'sweep')


# ---- reading the docs ----------------------------------------------------------------------

def doc_files() -> list[str]:
  return ['README.md'] + sorted(os.path.relpath(p, ROOT)
                                for p in glob.glob(os.path.join(ROOT, 'docs', '*.md')))


def shell_snippets(text: str) -> list[tuple[int, str]]:
  """(line number, text) of each shell line of a fenced block and each inline code span."""
  found, lines = [], text.splitlines()
  prose: list[tuple[int, str]] = []      # the lines outside fenced blocks
  fence, language, pending = None, '', None
  for i, line in enumerate(lines, 1):
    stripped = line.strip()
    if fence is None:
      m = re.match(r'(```+|~~~+)\s*([\w+-]*)', stripped)
      if m:
        fence, language = m.group(1), m.group(2).lower()
        continue
      prose.append((i, line))
      continue
    if stripped.startswith(fence) and not stripped[len(fence):].strip():
      fence, pending = None, None
      continue
    if language not in SHELL_LANGUAGES:
      continue
    if pending is not None:
      start, so_far = pending
      line = so_far + ' ' + line.strip()
    else:
      start = i
    if line.rstrip().endswith('\\'):
      pending = (start, line.rstrip()[:-1])
      continue
    pending = None
    found.append((start, line.strip()))
  # inline spans: within a paragraph (a span may cross a line end, never a blank line)
  paragraph: list[tuple[int, str]] = []
  for i, line in prose + [(0, '')]:
    if line.strip():
      paragraph.append((i, line))
      continue
    if paragraph:
      joined = '\n'.join(l for _, l in paragraph)
      for m in re.finditer(r'(?<!`)`([^`]+)`(?!`)', joined):
        found.append((paragraph[0][0] + joined.count('\n', 0, m.start()),
                      ' '.join(m.group(1).split())))
    paragraph = []
  return sorted(found)


def split_commands(snippet: str) -> list[list[str]] | str:
  """The commands of a shell snippet (bash launch.sh ... / python -m experiments. ...), each
  as its words; a string: why it could not be read."""
  text = re.sub(r'<[^<>\s]+>', PLACEHOLDER, snippet)                       # <sweep> -> a word
  text = re.sub(r'(?<![\w=])\d*(?:>>|>|<)(?:&\d+|\s*[^\s|;&<>]+)', ' ', text)   # redirections
  lexer = shlex.shlex(text, posix=True, punctuation_chars=';&|')
  lexer.whitespace_split = True
  lexer.commenters = '#'
  try:
    words = list(lexer)
  except ValueError as e:
    return f'cannot split it as a shell line ({e})'
  parts, part = [], []
  for w in words:
    if w and set(w) <= set(';&|'):
      parts.append(part)
      part = []
    else:
      part.append(w)
  parts.append(part)
  commands = []
  for part in parts:
    while part and (re.fullmatch(r'[A-Za-z_]\w*=.*', part[0]) or part[0] in PREFIXES
                    or part[0] == '$'):
      part = part[1:]
    if part[:1] == ['timeout']:
      part = part[2:]
    if part[:2] == ['bash', 'launch.sh'] or (
        part[:1] in (['python'], ['python3']) and part[1:2] == ['-m']
        and part[2:3] and part[2].startswith('experiments.')):
      commands.append(part)
  return commands


def doc_commands(path: str, text: str | None = None) -> tuple[list[Command], list[str]]:
  """The commands of a doc file (or of `text`, shown as `path`), and what could not be read."""
  if text is None:
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
      text = f.read()
  commands, unread = [], []
  for line, snippet in shell_snippets(text):
    if 'launch.sh' not in snippet and 'python -m experiments' not in snippet:
      continue
    got = split_commands(snippet)
    if isinstance(got, str):   # a problem if it reads as a command (not prose in a tree)
      if re.match(r'(\$ )?(\w+=\S* )*(bash launch\.sh|python3? -m experiments\.)', snippet):
        unread.append(f'{path}:{line}: {got}: {snippet}')
      continue
    commands += [Command(f'{path}:{line}', words, snippet) for words in got]
  return commands, unread


# ---- what exists -----------------------------------------------------------------------------

@functools.cache
def launch_branches() -> dict[str, Branch]:
  """launch.sh's commands (the branches of its second `case "$cmd"`), each with the entry
  point it runs (`exec python -m MODULE ...`) and the flags it fixes or fills."""
  with open(LAUNCH) as f:
    text = f.read()
  body = text[text.rindex('case "$cmd" in'):]
  branches = {}
  for name, block in re.findall(r'^  ([a-z][a-z-]*)\)\n(.*?)^    ;;', body, re.M | re.S):
    runs = re.findall(r'exec python -m (experiments\.[\w.]+)(.*)', block)
    if not runs:                                     # test: pytest; docs: mkdocs
      branches[name] = Branch(None, {})
      continue
    module, rest = runs[-1]                          # the last: the command itself, not --help
    fixed = dict(re.findall(r'--(\w+)=([^\s"$]+)', rest))
    positional = re.search(r'--(\w+)="\$\w+"', rest)
    branches[name] = Branch(module, fixed, positional and positional.group(1))
  return branches


@functools.cache
def launch_flags() -> dict[str, str]:
  """launch.sh's own flags (multihost_args: `--coordinator HOST:PORT`, ...) -> the flag of
  the entry point each becomes (`--num-processes` -> `num_processes`)."""
  with open(LAUNCH) as f:
    m = re.search(r'^\s+(--[\w|-]+)\)\n.*needs a value', f.read(), re.M)
  return {flag: flag[2:].replace('-', '_') for flag in m.group(1).split('|')}


@functools.cache
def module_flags(module: str) -> dict[str, bool]:
  """The flags `python -m module --helpfull` lists -> whether each is a boolean (then its
  `--noflag` exists too); short names ('-v') included."""
  return all_module_flags((module,))[module]


_FLAGS: dict[str, dict[str, bool]] = {}


def all_module_flags(modules) -> dict[str, dict[str, bool]]:
  """module_flags of several entry points, their --helpfull run at once."""
  missing = sorted(set(modules) - set(_FLAGS))
  if missing:
    procs = {}
    for m in missing:   # each: forks of one server that imported the package once
      procs[m] = run_modules(m, [['--helpfull']], timeout=300)[0]
    for m, proc in procs.items():
      names = {}
      for short, no, name in re.findall(r'^\s+(?:(-[^\s,]+),)?--(\[no\])?([\w.-]+):',
                                        proc.stdout, re.M):
        names[name] = bool(no)
        if short:
          names[short] = bool(no)
      assert names, f'python -m {m} --helpfull listed no flags: {proc.stderr[-2000:]}'
      _FLAGS[m] = names
  return {m: _FLAGS[m] for m in modules}


def is_placeholder(word: str) -> bool:
  """RUN, F, SWEEP_FILE[:arg], HOST:PORT, runs/<sweep>, ...: no lower-case letter outside
  brackets (a `[:arg]` suffix aside), or a `<...>`."""
  if PLACEHOLDER in word or word in ('...', '…'):
    return True
  bare = re.sub(r'\[[^\]]*\]', '', word)
  return bool(re.search(r'[A-Z]', bare)) and not re.search(r'[a-z]', bare)


def optional_forms(word: str) -> list[str]:
  """`file.py[:reverse]` -> ['file.py', 'file.py:reverse']; other words as they are."""
  m = re.fullmatch(r'([^\[]+)\[([^\]]*)\]', word)
  return [m.group(1), m.group(1) + m.group(2)] if m else [word]


@functools.cache
def load_config_file(spec: str):
  """(config, sweep variant names or None) of `path[:arg]`; raises what loading raises."""
  path, _, arg = spec.partition(':')
  if path.startswith('experiments/configs/') and '/' not in path[len('experiments/configs/'):]:
    module = importlib.import_module('experiments.configs.' + os.path.basename(path)[:-3])
  else:
    loader = importlib.util.spec_from_file_location('doc_config', os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
  config = module.get_config(arg or None)
  names = None
  if hasattr(module, 'get_sweep'):
    names = tuple(name for name, _ in module.get_sweep(arg or None))
  return config, names


def check_file(word: str) -> list[str]:
  """The problems of a repository file a command names (nothing for other paths)."""
  problems = []
  for form in optional_forms(word):
    path, _, rest = form.partition('::')
    file, _, arg = path.partition(':')
    if not file.startswith(('experiments/', 'tests/')) or is_placeholder(form):
      continue
    if not os.path.isfile(os.path.join(ROOT, file)):
      problems.append(f'no file {file}')
    elif file.startswith('experiments/configs/') and file.endswith('.py'):
      try:
        load_config_file(path)
      except Exception as e:  # pylint: disable=broad-except  (reported, whatever it is)
        problems.append(f'{path}: get_config({arg or None!r}) fails: '
                        f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}')
    elif rest:
      with open(os.path.join(ROOT, file), encoding='utf-8') as f:
        test_name = rest.split('[')[0]
        if not re.search(rf'^\s*def {re.escape(test_name)}\(', f.read(), re.M):
          problems.append(f'{file} has no test {test_name}')
  return problems


def check_config_field(spec: str | None, field: str) -> str | None:
  """Why `--config.<field>` is not a field of config `spec` (None: it is)."""
  if spec is None or is_placeholder(spec):
    from experiments.configs import common  # pylint: disable=import-outside-toplevel
    config, where = common.base_config(), 'the base config (experiments/configs/common.py)'
  else:
    try:
      config, _ = load_config_file(spec)
    except Exception:  # pylint: disable=broad-except  (check_file reports the file)
      return None
    where = spec
  node = config
  for i, key in enumerate(field.split('.')):
    if not hasattr(node, 'keys') or key not in node:
      return f'--config.{field}: {where} has no field {".".join(field.split(".")[:i + 1])}'
    node = node[key]
  return None


# ---- checking one command ---------------------------------------------------------------------

def unbracket(word: str) -> str:
  """The word of an optional part: `[--beam=5]` -> `--beam=5`; `file.py[:arg]` stays."""
  if word.startswith('['):
    word = word[1:]
  while word.endswith(']') and word.count(']') > word.count('['):
    word = word[:-1]
  return word


def entry_point(cmd: Command) -> tuple[str | None, Branch | None, str | None, list[str]]:
  """(launch.sh command, its branch, the entry point module, its arguments) of a command;
  the command is None for `python -m`, the branch None for an unknown launch.sh command."""
  words = [w for w in map(unbracket, cmd.words) if w]
  if words[0] != 'bash':
    return None, None, words[2], words[3:]
  args = words[2:]
  if args and args[0] in HELP_WORDS:
    return args[0], None, None, []
  name = 'main' if not args or args[0].startswith('-') else args.pop(0)
  branch = launch_branches().get(name)
  return name, branch, branch and branch.module, args


def check(cmd: Command) -> list[str]:
  """The problems of one command, each 'file:line: problem: the command'."""
  branch_name, branch, module, args = entry_point(cmd)
  if branch_name in HELP_WORDS:
    return []
  if branch_name is not None and branch is None:
    return [f'{cmd.where}: launch.sh has no command {branch_name!r} '
            f'(its commands: {", ".join(launch_branches())}): {cmd.text}']
  if branch is None and not os.path.isfile(os.path.join(ROOT, *module.split('.')) + '.py'):
    return [f'{cmd.where}: no entry point {module} (experiments/...py): {cmd.text}']
  flags_given = dict(branch.fixed) if branch else {}
  problems, positional, overrides, only = [], [], [], []
  known = module_flags(module) if module else None
  extra = launch_flags() if branch is not None else {}
  i = 0
  while i < len(args):
    word = args[i]
    i += 1
    if is_placeholder(word) or not word.startswith('-') or word == '-':
      positional.append(word)
      continue
    name, eq, value = word.lstrip('-').partition('=')
    if word in extra:                                  # launch.sh's own: --coordinator H:P
      if known is not None and extra[word] not in known:
        problems.append(f'{word} (becomes --{extra[word]}) is not a flag of {module}')
      i += 1
      continue
    if known is None:                                  # pytest's or mkdocs' flags
      continue
    if name.startswith('config.'):
      overrides.append(name[len('config.'):])
      if 'config' not in known:
        problems.append(f'--{name}: {module} has no --config flag to override')
      continue
    if is_placeholder(name):
      continue
    short = word.startswith('-') and not word.startswith('--')
    key = '-' + name if short else name
    is_bool = known.get(key)
    if is_bool is None and name.startswith('no') and known.get(name[2:]):
      is_bool = True
    if is_bool is None:
      problems.append(f'{"-" if short else "--"}{name} is not a flag of {module} '
                      f'(python -m {module} --helpfull)')
      continue
    if not eq and not is_bool and i < len(args):       # --flag value
      value = args[i]
      i += 1
    if value:
      flags_given[name] = value
      if name == 'only':
        only += [p.strip('\'"') for p in value.split(',') if p]
      problems += check_file(value)

  for word in positional:
    problems += check_file(word)
  if branch is not None and branch.positional:
    if positional:
      flags_given[branch.positional] = positional[0]
    elif not (branch_name and any(w in HELP_WORDS or w == '--helpfull' for w in args)):
      problems.append(f'{branch_name} needs its {branch.positional} file')
  for spec in optional_forms(flags_given.get('sweep', '')):
    if not spec or is_placeholder(spec) or problems:
      continue
    try:
      _, names = load_config_file(spec)
    except Exception:  # pylint: disable=broad-except  (check_file has reported it)
      continue
    if names is None:
      problems.append(f'{spec} is not a sweep file (it has no get_sweep)')
    for pattern in only:
      if names is not None and not any(fnmatch.fnmatchcase(n, pattern) for n in names):
        problems.append(f'--only={pattern} matches no variant of {spec}')
  config = flags_given.get('config') if 'config' in (known or {}) else None
  for field in overrides:
    for spec in optional_forms(config) if config else [None]:
      problem = check_config_field(spec, field)
      if problem:
        problems.append(problem)
  return [f'{cmd.where}: {p}: {cmd.text}' for p in dict.fromkeys(problems)]


def check_all(paths_and_texts) -> tuple[list[Command], list[str]]:
  """Every command of the given (path, text or None) docs, and every problem found."""
  commands, problems = [], []
  for path, text in paths_and_texts:
    found, unread = doc_commands(path, text)
    commands += found
    problems += unread
  modules = {entry_point(c)[2] for c in commands}
  all_module_flags(sorted(m for m in modules
                          if m and os.path.isfile(os.path.join(ROOT, *m.split('.')) + '.py')))
  for c in commands:
    problems += check(c)
  return commands, problems


# ---- the tests ---------------------------------------------------------------------------------

def test_every_command_in_the_readme_and_docs_exists_with_its_flags_files_and_fields():
  commands, problems = check_all((path, None) for path in doc_files())
  assert len(commands) > 50, f'only {len(commands)} commands found: is the parser broken?'
  assert not problems, '\n'.join(problems)


def test_a_renamed_flag_command_file_or_field_is_reported():
  """The check above can fail: a doc with one mistake per line gets one problem per line."""
  doc = '\n'.join([
      'Run `bash launch.sh evaluate --workdir=runs/X --beams=5` first.',                 # 1
      '```bash',                                                                         # 2
      'bash launch.sh train experiments/configs/dates.py --workdir=runs/d \\',           # 3
      '    --config.model.scroe=general   # a typo in a field',
      'bash launch.sh train experiments/configs/no_such.py --workdir=runs/d',            # 5
      'bash launch.sh trian experiments/configs/dates.py',                               # 6
      'bash launch.sh sweep experiments/configs/score_sweep.py --only=bogus_*',         # 7
      'bash launch.sh sweep experiments/configs/score_sweep.py --config.train.steps=5',  # 8
      'bash launch.sh train experiments/configs/dates.py:smok --workdir=runs/d',         # 9
      'python -m experiments.compare runs/a runs/b --split=test --metrics=bleu',         # 10
      'bash launch.sh train CONFIG --workdir=W --config.train.stpes=5',                  # 11
      'bash launch.sh test tests/test_nothing_here.py',                                  # 12
      '```',
      'and the right ones pass: `bash launch.sh evaluate --workdir=RUN --beam=5 [--alpha=0.6]`,',
      '`bash launch.sh sweep experiments/configs/transformer_scores.py[:reverse] --seeds=2`,',
      '`python -m experiments.sweep_report runs/<sweep> [--baseline=V]`,',
      '`bash launch.sh train CONFIG --workdir=W --coordinator HOST:PORT --num-processes N`.',
  ])
  commands, problems = check_all([('fake.md', doc)])
  assert len(commands) == 14, [c.text for c in commands]
  lines = sorted(int(p.split(':')[1]) for p in problems)
  assert lines == [1, 3, 5, 6, 7, 8, 9, 10, 11, 12], '\n'.join(problems)
  text = '\n'.join(problems)
  for expected in ('--beams is not a flag of experiments.evaluate',
                   'has no field model.scroe', 'no file experiments/configs/no_such.py',
                   "launch.sh has no command 'trian'", '--only=bogus_* matches no variant',
                   '--config.train.steps: experiments.sweep has no --config flag',
                   "get_config('smok') fails", '--metrics is not a flag of experiments.compare',
                   'the base config (experiments/configs/common.py) has no field train.stpes',
                   'no file tests/test_nothing_here.py'):
    assert expected in text, (expected, text)
