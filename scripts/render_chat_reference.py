#!/usr/bin/env python3
"""Reference renders of chat templates by Python's jinja2, for text/chat_template.h's tests.

Builds the environment transformers' apply_chat_template renders with
(transformers/utils/chat_template_utils.py, _compile_jinja_template), with plain jinja2 and
no transformers:

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)
  globals: raise_exception(msg) (a TemplateError), strftime_now(fmt)

and renders
  - every template listed in TEMPLATES over every conversation of DIR/conversations.json (its
    "variables" are passed to render() as they are), into DIR/expected.json;
  - the engine-feature cases of FEATURES below (a short template and its variables each), into
    DIR/features.json.
A case that jinja2 refuses records "error": "<ExceptionType>: <message>" instead of "output"
(the C++ must fail there too). Run with jinja2 3.1:

  python3 scripts/render_chat_reference.py tests/data/chat           # write the two files
  python3 scripts/render_chat_reference.py --check tests/data/chat   # compare with them (exit 1)

--check renders again with the jinja2 at hand (CI: Debian's python3-jinja2) and reports every case
whose output or error differs from the committed files, so the C++ is held to jinja2 itself.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = {
    "glm-5.3-flash": "glm-5.3-flash.jinja",
    "glm-5.3-flash-nvfp4": "glm-5.3-flash-nvfp4.jinja",
    "glm-5": "glm-5.jinja",
    "glm-4.6": "glm-4.6.jinja",
}


class AssistantTracker(Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body (a caller block)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, variables):
    try:
        return {"output": env.from_string(source).render(**variables)}
    except Exception as e:  # jinja2 refused: the case records why
        return {"error": f"{type(e).__name__}: {e}"}


# (name, template, variables): each feature of the engine beyond what the GLM templates use.
FEATURES = [
    # ---- printing values as Python's str() ----
    ("print none bools numbers", "{{ none }}|{{ None }}|{{ true }}|{{ False }}|{{ 42 }}|{{ -7 }}", {}),
    ("print floats as python repr",
     "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ -0.0 }} {{ 2.5e-7 }} "
     "{{ 123456789012345678.0 }} {{ x }} {{ y }}", {"x": 3.14, "y": 1e300}),
    ("print containers as python repr",
     "{{ [1, 'a', none, true, 1.5, {'k': 'v'}, ('t',), (1, 2), ()] }}|{{ x }}|{{ {} }}|{{ [] }}",
     {"x": {"role": "user", "n": [1, 2.0], "ok": False, "nil": None}}),
    ("print string repr quoting and escapes",
     "{{ ['it\\'s', 'q\"', 'both \\' \"', 'a\\nb\\tc', 'back\\\\slash', 'é', '\\u200b', '\\xa0', '\\x7f', '😀'] }}", {}),
    ("print undefined as empty", "[{{ missing }}][{{ x.nope }}][{{ x['nope'] }}][{{ l[9] }}]", {"x": {}, "l": [1]}),
    ("print namespace and loop and macro",
     "{% set ns = namespace(a=1, b='x') %}{{ ns }}{% for i in [1, 2] %}{{ loop }}{% endfor %}"
     "{% macro m() %}{% endmacro %}{{ m }}", {}),
    ("print dict views and range", "{{ d.items() }}|{{ d.keys() }}|{{ d.values() }}|{{ range(3) }}|{{ range(1, 9, 2) }}",
     {"d": {"a": 1, "b": [2]}}),
    # ---- literals ----
    ("string literal escapes",
     "{{ 'a\\tb' }}|{{ \"q\\\"q\" }}|{{ 'x\\x41\\u00e9\\U0001F600' }}|{{ '\\101' }}|{{ 'keep\\d' }}|{{ 'ad' 'jacent' }}", {}),
    ("number literals", "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 1e3 }} {{ 2.5E-3 }} {{ 0 }} {{ 00 }}", {}),
    ("true false none in both cases", "{{ true == True }}{{ false is sameas False }}{{ none is none }}{{ None == none }}", {}),
    ("list tuple dict literals",
     "{{ [1, [2, [3]], ] }}{{ (1, ) }}{{ (1, 2,) }}{{ {'a': 1, 'b': {'c': [1]}, } }}{{ {1: 'x', 2.5: 'y', none: 'z'} }}", {}),
    ("print tuple of expressions", "{{ 1, 'a' }}", {}),
    # ---- attribute and item access ----
    ("dict attribute and item lookup", "{{ d.name }} {{ d['name'] }} {{ d.nested.k }} {{ d['nested']['k'] }}",
     {"d": {"name": "n", "nested": {"k": [1, 2]}}}),
    ("dot number index", "{{ l.0 }} {{ l.1.x }} {{ s.0 }} {{ d.items.0 }}", {"l": ["a", {"x": 5}], "s": "hey", "d": {"items": [7]}}),
    ("method wins over key for attribute access", "{{ d['items'] }}|{{ d.get('items') }}|{{ d['keys'] }}",
     {"d": {"items": "mine", "keys": 1}}),
    ("negative indices and slices",
     "{{ l[-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ l[::-1] }} {{ l[5:] }} {{ s[1:4] }} {{ s[-2:] }} {{ u[1:3] }} {{ (1,2,3)[1:] }}",
     {"l": [1, 2, 3, 4], "s": "abcdef", "u": "h€llo"}),
    ("index out of range is undefined", "{{ l[5] is defined }}|{{ l[-9] is undefined }}|{{ s[10] }}", {"l": [1], "s": "ab"}),
    ("attribute of undefined is an error", "{{ missing.attr }}", {}),
    ("attribute of missing key is an error", "{{ d.a.b }}", {"d": {}}),
    ("item of out of range element is an error", "{{ l[3].x }}", {"l": [1]}),
    ("attribute of none is undefined", "[{{ n.x }}]{{ n.x is defined }}", {"n": None}),
    # ---- string methods ----
    ("strip family", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ t.strip('x') }}][{{ t.lstrip('xa') }}][{{ t.rstrip('x') }}]",
     {"s": " \t hi there \n", "t": "xxaxhixx"}),
    ("split and rsplit",
     "{{ s.split() }}{{ s.split(' ') }}{{ c.split(',') }}{{ c.split(',', 1) }}{{ c.rsplit(',', 1) }}{{ s.split(None, 1) }}{{ c.split(',', -1) }}",
     {"s": "  a  b c ", "c": "x,y,,z"}),
    ("startswith endswith", "{{ s.startswith('ab') }}{{ s.endswith('ef') }}{{ s.startswith(('x', 'a')) }}{{ s.endswith('zz') }}",
     {"s": "abcdef"}),
    ("case methods", "{{ s.lower() }}|{{ s.upper() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.swapcase() }}|{{ 'straße'.upper() }}",
     {"s": "hELLO wORLD it's ünïcode"}),
    ("replace find count", "{{ s.replace('a', 'o') }}|{{ s.replace('a', 'o', 1) }}|{{ s.find('n') }}|{{ s.rfind('a') }}|{{ s.count('a') }}|{{ s.find('z') }}",
     {"s": "banana"}),
    ("join and misc string methods",
     "{{ ', '.join(l) }}|{{ s.isdigit() }}{{ 'abc'.isalpha() }}{{ ' '.isspace() }}|{{ '7'.zfill(3) }}|{{ 'ab'.center(6, '*') }}|{{ 'a=b=c'.partition('=') }}|{{ 'x\\ny'.splitlines() }}",
     {"l": ["a", "b", "c"], "s": "123"}),
    ("string format method", "{{ '{} and {}'.format('a', 1) }}|{{ '{1}{0}'.format('x', 'y') }}|{{ '{n}!'.format(n=3) }}", {}),
    ("percent formatting", "{{ '%s-%d-%05.2f-%r-%x' % ('a', 7, 3.14159, 'q', 255) }}|{{ '%s' % none }}|{{ '%(k)s' % {'k': 'v'} }}|{{ '100%%' % () }}", {}),
    # ---- dict and list methods ----
    ("dict methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }}{{ d.values()|list }}{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 0) }}",
     {"d": {"b": 2, "a": 1}}),
    ("list methods", "{{ l.count(2) }} {{ l.index(3) }}", {"l": [2, 3, 2]}),
    ("mutating methods are refused", "{{ l.append(1) }}", {"l": []}),
    # ---- filters ----
    ("tojson defaults", "{{ x|tojson }}", {"x": {"b": 1, "a": [1, 2.5, "é", None, True, {"c": {}}], "u": "\u2028\u0007\"\\"}}),
    ("tojson options",
     "{{ x|tojson(indent=2) }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(ensure_ascii=true) }}|{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(indent='\\t', sort_keys=true) }}|{{ [1, []]|tojson(indent=0) }}",
     {"x": {"z": "ü😀", "a": [1, {"k": None}], "e": []}}),
    ("tojson of numbers and tuples", "{{ 1.0|tojson }} {{ 1e100|tojson }} {{ (1, 'a')|tojson }} {{ {1: 2, true: 3}|tojson }} {{ 'x'|tojson }}", {}),
    ("tojson of undefined is an error", "{{ missing|tojson }}", {}),
    ("length and count", "{{ s|length }} {{ l|length }} {{ d|count }} {{ missing|length }} {{ 'héllo😀'|length }}",
     {"s": "abc", "l": [1, 2], "d": {"a": 1}}),
    ("capitalize trim string", "{{ 'max'|capitalize }}|{{ 'mIXED case'|capitalize }}|{{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 5|string }}|{{ none|string }}", {}),
    ("default filter", "{{ missing|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ none|default('d') }}|{{ 0|d('z', true) }}", {}),
    ("join filter", "{{ l|join }}|{{ l|join(', ') }}|{{ d|join('-', attribute='n') }}|{{ [1, none, 2.0]|join(',') }}",
     {"l": ["a", "b"], "d": [{"n": 1}, {"n": "x"}]}),
    ("first last", "{{ l|first }} {{ l|last }} {{ 'xyz'|first }} {{ 'xyz'|last }} {{ d|first }} [{{ []|first }}]", {"l": [3, 4, 5], "d": {"k1": 1, "k2": 2}}),
    ("lower upper replace", "{{ 'AbC'|lower }} {{ 'AbC'|upper }} {{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}", {}),
    ("list filter", "{{ 'abc'|list }} {{ d|list }} {{ range(3)|list }} {{ missing|list }}", {"d": {"x": 1, "y": 2}}),
    ("int float abs", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} {{ ' 12 '|int }} {{ '2'|float }} {{ 'n'|float }} {{ -3|abs }} {{ -2.5|abs }} {{ true|int }}", {}),
    ("map filter", "{{ l|map(attribute='a')|list }} {{ l|map(attribute='a', default=0)|list }} {{ ['x', 'Y']|map('upper')|list }} {{ [1, 2]|map('string')|join('+') }}",
     {"l": [{"a": 1}, {"b": 2}, {"a": 3}]}),
    ("selectattr rejectattr select reject",
     "{{ l|selectattr('on')|map(attribute='n')|list }} {{ l|rejectattr('on')|map(attribute='n')|list }} {{ l|selectattr('n', 'equalto', 2)|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }}",
     {"l": [{"n": 1, "on": True}, {"n": 2, "on": False}, {"n": 3}]}),
    ("sort unique reverse sum min max",
     "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ l|sort(attribute='n')|map(attribute='n')|list }} {{ [1, 2, 1, 3]|unique|list }} {{ [1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2.5]|sum }} {{ [4, 1, 9]|min }} {{ [4, 1, 9]|max }}",
     {"l": [{"n": 2}, {"n": 1}]}),
    ("dictsort items batch", "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|items|list }} {{ [1, 2, 3]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }}",
     {"d": {"b": 1, "a": 2, "C": 0}}),
    ("title center indent wordcount round",
     "{{ 'hello-world foo(bar)'|title }}|{{ 'x'|center(5) }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'one two, three'|wordcount }}|{{ 2.567|round(1) }} {{ 2.5|round }} {{ 3|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }}", {}),
    ("escape safe format attr", "{{ '<a href=\"x\">&\\'</a>'|e }}|{{ 'x<y'|safe }}|{{ '%s=%d'|format('k', 3) }}|{{ ns|attr('v') }}",
     {"ns": {"v": 1}}),
    ("filter chain with arguments", "{{ '  A,b ,C '|trim|lower|replace(' ', '')|list|join('|') }}", {}),
    # ---- tests ----
    ("type tests",
     "{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is mapping }}{{ 'a' is iterable }}{{ 5 is iterable }}{{ missing is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ none is none }}{{ true is boolean }}{{ 1 is boolean }}",
     {}),
    ("defined undefined true false tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}",
     {"x": None}),
    ("in eq and comparison tests", "{{ 2 is in [1, 2] }}{{ 'a' is in 'cat' }}{{ 2 is eq 2 }}{{ 2 is equalto 3 }}{{ 3 is gt 2 }}{{ 3 is lessthan 2 }}{{ 2 is ne 2 }}{{ 4 is ge 4 }}",
     {}),
    ("numeric tests", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ x is not none }}{{ 'abc' is lower }}{{ 'ABC' is upper }}",
     {"x": 0}),
    ("callable filter test tests", "{{ range is callable }}{{ 'x' is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'nope' is filter }}", {}),
    # ---- operators ----
    ("boolean operators return operands", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or none }}|{{ not 0 }}|{{ not 'a' }}|{{ 1 and 0 or 5 }}", {}),
    ("comparisons and chains", "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 'a' != 'a' }}{{ 2 <= 2 }}{{ none == none }}{{ x == y }}", {}),
    ("in and not in", "{{ 'a' in 'cat' }}{{ 'z' not in 'cat' }}{{ 1 in [1, 2] }}{{ 'k' in d }}{{ 'v' in d }}{{ 3 not in (1, 2) }}{{ 1 in missing }}",
     {"d": {"k": "v"}}),
    ("arithmetic", "{{ 1 + 2 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ 7.5 // 2 }} {{ -5.5 % 2 }} {{ 1 + 2.0 }} {{ true + true }}", {}),
    ("string and list arithmetic", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] + [2, 3] }} {{ [0] * 3 }} {{ 'x' * 0 }} {{ (1,) + (2,) }}", {}),
    ("tilde concatenation", "{{ 'a' ~ 1 ~ none ~ true ~ missing ~ [1] }}", {}),
    ("unary minus and plus", "{{ -x }} {{ +x }} {{ -(1 + 2) }} {{ - 2 ** 2 }} {{ -1|abs }} {{ -y }}", {"x": 5, "y": 1.5}),
    ("division by zero is an error", "{{ 1 / 0 }}", {}),
    ("adding string and int is an error", "{{ 'a' + 1 }}", {}),
    ("ordering mixed types is an error", "{{ 1 < 'a' }}", {}),
    ("arithmetic on undefined is an error", "{{ missing + 1 }}", {}),
    ("conditional expression", "{{ 'y' if true else 'n' }}|{{ 'y' if false else 'n' }}|{{ 'y' if false }}|{{ ('y' if false) is defined }}|{{ 'a' if x else 'b' if y else 'c' }}",
     {"x": 0, "y": 1}),
    ("operator precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ not 1 == 2 }} {{ (1 + 2) ~ 3 }} {{ 'a' ~ (1 + 2) }} {{ 2 * 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 1 if 0 or 1 else 2 }} {{ 2 ~ 3 * 2 }}", {}),
    ("concatenation binds tighter than plus", "{{ 1 + 2 ~ 3 }}", {}),
    # ---- statements ----
    ("if elif else", "{% for x in [1, 2, 3, 0] %}{% if x == 1 %}one{% elif x == 2 %}two{% elif x %}many{% else %}zero{% endif %},{% endfor %}", {}),
    ("for loop variables",
     "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('o', 'e') }} {% endfor %}",
     {}),
    ("for over dict string and undefined", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héy' %}{{ c }}.{% endfor %}|{% for x in missing %}x{% endfor %}",
     {"d": {"b": 1, "a": 2}}),
    ("for tuple unpacking", "{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }};{% endfor %}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
     {"d": {"p": 1, "q": 2}}),
    ("for unpacking mismatch is an error", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("for else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1, 2] if x > 5 %}x{% else %}none kept{% endfor %}|{% for x in [1] %}{{ x }}{% else %}no{% endfor %}", {}),
    ("for with inline if filter", "{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("break and continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("nested loops and loop shadowing", "{% for i in [1, 2] %}{% for j in 'ab' %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("recursive loop", "{% for x in tree recursive %}<{{ x.n }}:{{ loop.depth }}{% if x.c %}{{ loop(x.c) }}{% endif %}>{% endfor %}",
     {"tree": [{"n": "a", "c": [{"n": "b", "c": [{"n": "c"}]}]}, {"n": "d"}]}),
    ("loop changed", "{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }},{% endfor %}", {}),
    ("set forms", "{% set a = 1 %}{% set b, c = 2, 3 %}{% set t = 4, 5 %}{% set ns = namespace(v=0) %}{% set ns.v = ns.v + a %}{{ a }}{{ b }}{{ c }}{{ t }}{{ ns.v }}", {}),
    ("set block and filtered set block", "{% set x %}a {{ 1 + 1 }} b{% endset %}[{{ x }}]{% set y | upper | trim %}  shout {% endset %}[{{ y }}]", {}),
    ("set attribute on non namespace is an error", "{% set x = 1 %}{% set x.a = 2 %}", {}),
    ("namespace from dict and kwargs", "{% set ns = namespace(d, extra=1) %}{{ ns.a }}{{ ns.extra }}{% set ns.a = 'new' %}{{ ns.a }}{{ ns.missing is defined }}",
     {"d": {"a": "old"}}),
    ("macro defaults and keywords",
     "{% macro greet(name, punct='!', times=1) %}{{ ('hi ' ~ name ~ punct) * times }}{% endmacro %}{{ greet('a') }}|{{ greet('b', '?') }}|{{ greet(name='c', times=2) }}|{{ greet() }}",
     {}),
    ("macro varargs kwargs caller", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}|"
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller('inner') }}</{{ tag }}>{% endmacro %}{% call(x) wrap('b') %}[{{ x }}]{% endcall %}", {}),
    ("macro default referencing earlier argument", "{% macro f(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ f(3) }}", {}),
    ("macro output is a string", "{% macro one() %}1{% endmacro %}{{ one() + '1' }}|{{ one() == '1' }}|{{ one() is string }}|{% if one() %}truthy{% endif %}", {}),
    ("macro too many arguments is an error", "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", {}),
    ("macro unknown keyword is an error", "{% macro f(a) %}{% endmacro %}{{ f(b=1) }}", {}),
    ("missing macro parameter is undefined", "{% macro f(a, b) %}[{{ b }}]{{ b is defined }}{% endmacro %}{{ f(1) }}", {}),
    ("macros see template globals at call time",
     "{% macro f() %}{{ g() }}-{{ v }}-{{ messages|length }}{% endmacro %}{% macro g() %}G{% endmacro %}{% set v = 'late' %}{{ f() }}",
     {"messages": [1, 2]}),
    ("macros do not see the caller's loop variables", "{% macro f() %}[{{ i }}]{% endmacro %}{% for i in [1] %}{{ f() }}{% endfor %}", {}),
    ("macro defined in a loop sees that iteration", "{% for i in [1, 2] %}{% set v = i * 10 %}{% macro f() %}{{ v }}{% endmacro %}{{ f() }},{% endfor %}", {}),
    ("recursive macro", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}", {}),
    ("range global", "{{ range(3)|list }}{{ range(2, 5)|list }}{{ range(10, 0, -3)|list }}{{ range(0)|list }}", {}),
    ("range too big is an error", "{{ range(200000)|length }}", {}),
    ("dict global", "{{ dict(a=1, b='x') }}", {}),
    ("raise_exception", "{% if not ok %}{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}", {"ok": False}),
    ("with block", "{% set a = 5 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}[{{ c }}]", {}),
    ("filter block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}|{% filter replace('a', 'o') | trim %}  banana  {% endfilter %}", {}),
    ("generation block renders its body", "<|assistant|>{% generation %}{% set g = 1 %}answer {{ g }}{% endgeneration %}[{{ g }}]", {}),
    ("comments", "a{# a comment #}b{#- trimmed -#}  c {# multi\nline #}d", {}),
    ("raw block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{%- raw -%}  {{ x }}  {%- endraw -%} |", {}),
    # ---- scoping ----
    ("assignments in a loop body reset every iteration", "{% set x = 0 %}{% for i in range(3) %}[{{ x }}{% set x = x + 1 %}{{ x }}]{% endfor %}{{ x }}", {}),
    ("conditional assignment in a loop does not carry to the next iteration",
     "{% for i in range(3) %}[{{ y is defined }}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ y }}]{% endfor %}[{{ y }}]", {}),
    ("outer value seen again each iteration", "{% set y = 1 %}{% for i in range(3) %}[{{ y }}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ y }}]{% endfor %}{{ y }}", {}),
    ("namespace carries state out of loops", "{% set ns = namespace(n=0, items=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.n }} {{ ns.items }}", {}),
    ("if does not make a scope", "{% if true %}{% set z = 'set in if' %}{% endif %}{{ z }}", {}),
    ("loop variable does not leak", "{% for i in [1, 2] %}{% endfor %}[{{ i }}]{% set i = 9 %}{% for i in [1] %}{% endfor %}{{ i }}", {}),
    ("loop else is its own scope", "{% set x = 1 %}{% for i in [] %}{% else %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}[{{ x }}]", {}),
    ("set block and filter block scopes", "{% set a = 0 %}{% set b %}{% set a = 1 %}{% endset %}{{ a }}{% filter upper %}{% set a = 2 %}{% endfilter %}{{ a }}", {}),
    ("template set shadows a render variable", "{{ v }}{% set v = v ~ '!' %}{{ v }}{% for i in [1] %}{{ v }}{% endfor %}", {"v": "x"}),
    ("loop variable reassigned inside its body", "{% for t in ['a', 'b'] %}{% set t = t ~ t %}{{ t }}{% endfor %}", {}),
    ("break inside a set block leaves the loop", "{% for i in range(3) %}{% set b %}{% if i == 1 %}{% break %}{% endif %}{% endset %}{{ i }}{% endfor %}", {}),
    # ---- whitespace control, trim_blocks, lstrip_blocks ----
    ("trim_blocks removes the newline after a block tag", "{% if true %}\nyes\n{% endif %}\nafter\n", {}),
    ("lstrip_blocks removes indentation before a block tag", "<ul>\n    {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>", {}),
    ("lstrip_blocks leaves text before a tag on the same line", "text  {% if true %}x{% endif %}  \n  {{ 'var' }}  {% if true %}y{% endif %}", {}),
    ("minus strips all whitespace", "a  \n\n  {%- if true -%}  \n\n  b  \n  {%- endif -%}\n\n  c", {}),
    ("minus on expressions", "a  \n  {{- 'b' -}}  \n  c {{ 'd' -}}\n e", {}),
    ("plus keeps whitespace", "a\n    {%+ if true %}b{% endif +%}\nc", {}),
    ("comment with trim and lstrip", "line1\n    {# note #}\nline2\n{#- tight -#}\nline3", {}),
    ("block tag at start and end of template", "{% if true %}\n\nx\n{% endif %}", {}),
    ("only one trailing newline is dropped", "x\n\n", {}),
    ("crlf newlines", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", {}),
    ("tabs and spaces with lstrip", "\t \t{% set a = 1 %}\n\t{{ a }}\n  \t{%- set b = 2 %}{{ b }}", {}),
    ("newline handling inside expression tags", "{{\n  'multi'\n  ~ 'line'\n}}|{%\n  if true\n%}ok{% endif %}", {}),
    ("braces inside expressions", "{{ {'a': {'b': 1}} }}|{{ {'a': {'b': 1}}['a'] }}", {}),
    # ---- corners found by differential fuzzing against jinja2 ----
    ("unknown filter inside an if is checked when it runs",
     "{% if false %}{{ x|nosuchfilter }}{% endif %}{{ 'a' if true else x|nosuchfilter }}ok", {}),
    ("unknown filter reached at run time is an error", "{% if true %}{{ 1|nosuchfilter }}{% endif %}", {}),
    ("filter with an unexpected keyword is an error", "{{ [1]|join(', ', attr='x') }}", {}),
    ("filter with too many arguments is an error", "{{ 'x'|upper(1) }}", {}),
    ("test with too many arguments is an error", "{{ 3 is odd(1) }}", {}),
    ("repeated keyword argument is an error", "{{ dict(a=1, a=2) }}", {}),
    ("trailing comma before in is a syntax error as in jinja2", "{% for k, in [[1]] %}{{ k }}{% endfor %}", {}),
    ("percent with an undefined operand", "[{{ '%s' % missing }}][{{ 'plain' % missing }}]", {}),
    ("sameas on undefined values", "{{ missing is sameas missing }}{{ none is sameas none }}{{ true is sameas true }}", {}),
    ("sort by attribute with missing keys keeps order", "{{ ['b', 'A', 'c']|sort(attribute='n') }}|{{ l|sort(attribute='a,b')|map(attribute='b')|list }}",
     {"l": [{"a": 2, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "a"}]}),
    ("comment and raw opened at the very end", "text{#", {}),
    ("float literals beyond the range", "{{ 1e400 }} {{ -1e400 }} {{ 1e-400 }}", {}),
    ("identifier with a character python refuses", "{{ a😀 }}", {}),
    ("caller prints as an anonymous macro", "{% macro m() %}{{ caller }}{% endmacro %}{% call m() %}{% endcall %}", {}),
    ("slicing a number is an error", "{{ n[1:] }}", {"n": 5}),
    ("indent of a number is an error", "{{ 5|indent }}", {}),
    # ---- syntax errors ----
    ("syntax error unclosed block", "{% if true %}x", {}),
    ("syntax error unknown tag", "{% frobnicate %}", {}),
    ("syntax error bad expression", "{{ 1 + }}", {}),
    ("syntax error unknown filter", "{{ x|nosuchfilter }}", {}),
    ("syntax error break outside loop", "{% break %}", {}),
]


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    out_dir = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "chat")
    env = environment()
    with open(os.path.join(out_dir, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)["conversations"]
    cases = []
    for key, file in TEMPLATES.items():
        with open(os.path.join(out_dir, file), encoding="utf-8") as f:
            source = f.read()
        for c in conversations:
            cases.append({"template": key, "conversation": c["name"], **render(env, source, c["variables"])})
    meta = {"generator": "scripts/render_chat_reference.py", "jinja2": jinja2.__version__}
    features = [{"name": name, "template": source, "variables": variables, **render(env, source, variables)}
                for name, source, variables in FEATURES]
    if check:
        sys.exit(compare(out_dir, cases, features))
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "templates": TEMPLATES, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "features.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "cases": features}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"{len(cases)} template cases ({errors} jinja2 errors), {len(features)} feature cases "
          f"({sum('error' in c for c in features)} errors)")


def compare(out_dir, cases, features):
    """Exit status of --check: 0 when every render equals the committed one."""
    bad = 0
    for file, fresh in (("expected.json", cases), ("features.json", features)):
        with open(os.path.join(out_dir, file), encoding="utf-8") as f:
            committed = json.load(f)
        if len(committed["cases"]) != len(fresh):
            print(f"{file}: {len(committed['cases'])} cases committed, {len(fresh)} rendered now")
            bad += 1
            continue
        for old, new in zip(committed["cases"], fresh):
            if old.get("output") != new.get("output") or ("error" in old) != ("error" in new):
                bad += 1
                name = new.get("name") or f"{new['template']} / {new['conversation']}"
                print(f"{file}: {name}: committed {old.get('output', old.get('error'))!r:.200}, "
                      f"jinja2 {jinja2.__version__} {new.get('output', new.get('error'))!r:.200}")
    print(f"render_chat_reference --check: jinja2 {jinja2.__version__}, {len(cases)} template cases and "
          f"{len(features)} feature cases, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    main()
