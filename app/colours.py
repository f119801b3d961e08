"""One fixed colour per benchmark arm, the same in every chart of the explorer.

A colour depends only on the arm's name, never on which arms a chart happens to show: the arms of the
arm table (and the ones announced for it) have a hand-picked colour — families share a hue family
(DFlash blues/greens, DCOCO reds/oranges, sequential correctors olive/grey, drafter-free baselines
light tones) —; an arm on the seeded drafter (`dflash-seeded`, the methods' `<name>-seeded`) gets a
darker shade of its plain twin's colour, so a method keeps its hue on either drafter; and any other name gets a
colour derived from a hash of the name (md5, so it is the same in every process), placed on a hue circle away from
the grey of AR.
"""
from __future__ import annotations

import colorsys
import hashlib

import altair as alt

# the arms that are not a corrector family's, in the table's order; each family's arms come from its record
# (`ArmEntry.colour`, draftlab.corrector.family), after them
BASE_COLOURS: dict[str, str] = {
    "ar": "#4d4d4d",
    "hf-generate": "#a6a6a6",
    "dflash": "#1f77b4",
    "dflash-specopd": "#2ca02c",
    "dflash-long": "#17becf",
    "dflash-ref": "#6baed6",
    "dflash-pld": "#98df8a",
    "pld": "#c49c94",
}


def family_colours() -> dict[str, str]:
    """Each corrector family's arm colours (its record's `arms`), in the families' order."""
    from draftlab.corrector.families import records

    return {"-".join(p for p in (method, option) if p): e.colour for f in records().values()
            for method, options in f.arms.items() for option, e in options.items() if e.colour}


ARM_COLOURS: dict[str, str] = {**BASE_COLOURS, **family_colours()}


SEEDED_SUFFIX = "-seeded"  # the arm table's naming rule for arms on the seeded drafter (draftlab.config.seeded)


def _twin(name: str) -> str | None:
    """The plain twin of a seeded arm with a hand-picked colour (`dcoco-seeded` -> `dcoco`), else None."""
    plain = name[: -len(SEEDED_SUFFIX)] if name.endswith(SEEDED_SUFFIX) else None
    return plain if plain in ARM_COLOURS else None


def _darker(colour: str) -> str:
    r, g, b = (int(colour[i:i + 2], 16) / 255.0 for i in (1, 3, 5))
    h, light, sat = colorsys.rgb_to_hls(r, g, b)
    if sat < 0.1:  # a grey twin (domino): a steel tint at its own lightness, not a darker grey (AR's)
        r, g, b = colorsys.hls_to_rgb(0.6, light, 0.25)
    else:
        r, g, b = colorsys.hls_to_rgb(h, light * 0.62, min(1.0, sat * 1.1))
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def arm_colour(name: str) -> str:
    """The arm's colour: the table's; for a seeded arm, a darker shade of its plain twin's; else one derived from
    the name's md5."""
    if name in ARM_COLOURS:
        return ARM_COLOURS[name]
    if _twin(name):
        return _darker(ARM_COLOURS[_twin(name)])
    h = hashlib.md5(name.encode("utf-8")).digest()
    hue = h[0] / 255.0
    light = 0.38 + 0.2 * (h[1] / 255.0)
    sat = 0.55 + 0.35 * (h[2] / 255.0)
    r, g, b = colorsys.hls_to_rgb(hue, light, sat)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def arm_order(arms) -> list[str]:
    """Arms in a stable order: the table's order first (a seeded arm right after its plain twin), then the others
    alphabetically."""
    known = list(ARM_COLOURS)
    arms = list(dict.fromkeys(str(a) for a in arms))

    def key(a: str):
        base = a if a in known else _twin(a)
        return (known.index(base) + (0.5 if base != a else 0.0) if base else len(known), a)

    return sorted(arms, key=key)


def arm_legend(columns: int = 1, title: str | None = "arm") -> alt.Legend:
    """A legend that shows every arm in full (no truncated labels, no '…N entries')."""
    return alt.Legend(title=title, labelLimit=0, symbolLimit=0, columns=columns)


def arm_scale(arms) -> alt.Scale:
    """A colour scale with the fixed colours of exactly the arms in `arms`."""
    order = arm_order(arms)
    return alt.Scale(domain=order, range=[arm_colour(a) for a in order])


def arm_color(arms, field: str = "arm", legend: alt.Legend | None | bool = True, **kw) -> alt.Color:
    """The colour encoding of an arm field with the fixed colours (legend=None hides the legend)."""
    return alt.Color(f"{field}:N", scale=arm_scale(arms), sort=arm_order(arms),
                     legend=arm_legend() if legend is True else legend, **kw)
