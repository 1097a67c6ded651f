"""A small sentiment lexicon for product reviews, and the scorer over it.

``analyze(text)`` gives a 1..5 score, up to three short reasons, and whether
the review reports damage in shipping. It is a deterministic stand-in for a
model, tuned on shoe and apparel reviews, not a classifier to trust.

Scoring, over lower-cased word tokens:

* Each lexicon term (a word, or a phrase such as "true to size" or "too big",
  longest match first) has a weight in -3..+3 and an aspect (comfort, fit,
  quality, ...); general terms ("great", "hate") take the aspect of the
  nearest aspect word ("price", "size", ...) within 3 tokens of the same
  sentence.
* Negation: a negator ("not", "no", "never", any "...n't") within the 3
  tokens before a term flips it to ``-0.75 * weight`` ("not good",
  "don't like", "no complaints"); the first term after it uses it up.
* Intensifiers within the 2 tokens before a term scale it ("very" x1.5,
  "really" x1.4; "slightly" x0.5).
* Contrast: in a sentence with "but" (or "however", "though"), terms before
  it count x0.7, terms after it x1.3.
* Shipping damage (see ``has_shipping_damage``) adds ``DAMAGE_WEIGHT``.
* ``score = clamp(floor(3 + 2 * tanh(total / SCALE) + 0.5), 1, 5)``: a
  review without sentiment words scores 3; "great" alone 4; "love them, so
  comfortable" 5.

Reasons come from the (aspect, polarity) groups with the largest summed
weight, strongest first, e.g. "praises comfort", "complains about sizing";
"reports shipping damage" comes first when detected; with no sentiment term
the only reason is "no strong sentiment words".
"""

from __future__ import annotations

import math
import re
from typing import Dict, FrozenSet, List, NamedTuple, Tuple

__all__ = ["Analysis", "analyze", "has_shipping_damage", "lexicon_size"]

SCALE = 3.0
NEGATION_FACTOR = -0.75
NEGATION_WINDOW = 3
INTENSIFIER_WINDOW = 2
ASPECT_WINDOW = 3
DAMAGE_WEIGHT = -2.5
BEFORE_CONTRAST, AFTER_CONTRAST = 0.7, 1.3
NO_SENTIMENT = "no strong sentiment words"
SHIPPING_DAMAGE = "reports shipping damage"
MAX_REASONS = 3

# "term weight" pairs per aspect; a phrase joins its words with "_".
_TERMS_BY_ASPECT: Dict[str, str] = {
    "general": """
        love 3 loved 3 loves 3 lovely 2 like 1.5 liked 1.5 likes 1.5 great 2.5 good 1.5
        nice 1.5 excellent 3 amazing 3 awesome 3 perfect 3 perfectly 2.5 wonderful 3
        fantastic 3 favorite 2.5 favourite 2.5 best 3 happy 2 pleased 2 satisfied 2
        recommend 2 recommended 2 glad 1.5 impressed 2 fine 0.5 decent 1 solid 1.5
        fabulous 3 terrific 3 superb 3 outstanding 3 enjoy 1.5 enjoyed 1.5 fun 1.5
        flawless 3 ideal 2 exactly 1 wow 1.5 thanks 1 thank 1 gracias 1 fast 1 quick 1
        quickly 1 as_expected 1 as_described 1 as_advertised 1 buy_again 2 order_again 2
        another_pair 1.5 second_pair 1.5 five_stars 3 5_stars 3
        exceeded_expectations 2.5 works_great 2 :) 1.5 :-) 1.5
        hate 3- hated 3- terrible 3- horrible 3- awful 3- worst 3- bad 2- poor 2- poorly 2-
        disappointed 2.5- disappointing 2.5- disappointment 2.5- useless 2.5- junk 3-
        garbage 3- crap 3- trash 3- return 1- returned 1.5- returning 1.5- refund 1.5-
        annoying 1.5- wrong 2- missing 2- problem 1.5- problems 1.5- issue 1- issues 1-
        complaint 1.5- complaints 1.5- regret 2- unhappy 2- slow 1- mediocre 1.5-
        meh 1- ok 0.3 okay 0.3 one_star 3- 1_star 3- two_stars 2- 2_stars 2- :( 1.5- :-( 1.5-
    """,
    "comfort": """
        comfortable 2.5 comfy 2.5 comfort 1.5 cushioned 1.5 cushy 2 soft 1.5 plush 1.5
        supportive 2 support 1 cushioning 1 cushion 1 breathable 1.5 like_a_cloud 2.5
        uncomfortable 2.5- painful 2.5- pain 2- hurt 2- hurts 2- blister 2-
        blisters 2- sore 1.5- stiff 1.5- rough 1- itchy 2- scratchy 1.5- rubs 1.5-
        pinches 1.5- slips 1-
    """,
    "fit": """
        true_to_size 2.5 like_a_glove 2 fits_great 2 fits_well 2 fit_well 2 snug 0.5
        too_big 2- too_small 2- too_tight 2- too_loose 2- too_narrow 2- too_wide 2-
        too_large 2- too_long 1.5- too_short 1.5- runs_small 1.5- runs_big 1.5-
        runs_large 1.5- run_small 1.5- run_big 1.5- run_large 1.5- runs_narrow 1.5-
        little_big 1- bit_big 1- little_small 1- bit_small 1- little_tight 1- bit_tight 1-
        little_narrow 1- bit_narrow 1- little_large 1- bit_large 1- narrow 1- tight 1-
        loose 1- baggy 1- oversized 1- undersized 1-
    """,
    "quality": """
        well_made 2 sturdy 2 durable 2 high_quality 2.5 holds_up 1.5 held_up 1.5
        cheap 1.5- cheaply 2- flimsy 2- fragile 1.5- fell_apart 3- falls_apart 3-
        falling_apart 3- fall_apart 2.5- came_apart 3- ripped 2- ripping 2- torn 2- broke 2-
        broken 2- defective 3- defect 2.5- damaged 2- faded 1.5- fading 1.5- peeling 2-
        unraveling 2- frayed 1.5- holes 1.5- hole 1.5- worn_out 2- smell 1.5- smells 1.5-
        stinks 2- odor 1.5- squeaky 1.5- squeak 1.5- squeaking 1.5- fake 3-
        counterfeit 3- knockoff 2.5- cracked 2- wet 1-
    """,
    "price": """
        bargain 2 affordable 1.5 inexpensive 1 worth 1.5 worth_it 2 worth_every_penny 3
        overpriced 2.5- expensive 1.5- pricey 1- waste_of_money 3-
    """,
    "looks": """
        beautiful 2.5 gorgeous 2.5 cute 2 stylish 2 sharp 1 sleek 1.5
        attractive 2 ugly 2.5- unattractive 2-
    """,
    "weight": """
        lightweight 2 light_weight 2 light 1 heavy 1.5- too_heavy 2-
        bulky 1.5- clunky 1.5-
    """,
    "shipping": """
        on_time 1.5 arrived_early 1.5 late 1.5- delayed 1.5-
    """,
    "service": """
        helpful 2 responsive 1.5 rude 2.5- unhelpful 2-
    """,
    # Read as neither: they only keep their words from matching alone.
    "none": """
        broken_in 0 breaking_in 0 break_in 0 not_only 0
    """,
}

# Words that give a general term its aspect.
_ASPECT_CUES_BY_ASPECT: Dict[str, str] = {
    "comfort": "insole insoles arch arches footbed padding",
    "fit": "fit fits fitting fitted size sizes sizing sized width length",
    "quality": "quality material materials stitching seams seam construction fabric sole soles laces made",
    "price": "price priced prices money cost value deal sale dollars",
    "looks": "color colors colour look looks looking style design appearance picture pictures photo",
    "shipping": "shipping shipped delivery delivered package packaging shipment",
    "service": "seller service vendor customer",
    "weight": "weight",
}

_REASONS: Dict[Tuple[str, bool], str] = {
    ("general", True): "expresses overall satisfaction",
    ("general", False): "expresses overall dissatisfaction",
    ("comfort", True): "praises comfort",
    ("comfort", False): "complains about comfort",
    ("fit", True): "praises the fit",
    ("fit", False): "complains about sizing",
    ("quality", True): "praises quality",
    ("quality", False): "complains about quality",
    ("price", True): "praises value for money",
    ("price", False): "complains about price",
    ("looks", True): "praises the look",
    ("looks", False): "dislikes the look",
    ("weight", True): "praises light weight",
    ("weight", False): "complains about weight",
    ("shipping", True): "praises shipping",
    ("shipping", False): "complains about shipping",
    ("service", True): "praises the seller's service",
    ("service", False): "complains about service",
}

_NEGATORS: FrozenSet[str] = frozenset(
    "not no never nor neither nothing none cannot hardly barely without dont didnt doesnt "
    "isnt wasnt arent werent cant wont couldnt wouldnt shouldnt havent hasnt aint".split()
)
_INTENSIFIERS: Dict[str, float] = {
    "very": 1.5, "really": 1.4, "so": 1.4, "extremely": 1.7, "super": 1.5, "absolutely": 1.6,
    "totally": 1.4, "incredibly": 1.6, "highly": 1.5, "truly": 1.4, "completely": 1.4,
    "most": 1.3, "quite": 1.2, "definitely": 1.3, "such": 1.3, "pretty": 1.1,
    "slightly": 0.5, "somewhat": 0.6, "kinda": 0.6, "little": 0.6, "bit": 0.6,
}
_CONTRASTS: FrozenSet[str] = frozenset({"but", "however", "though"})

# Shipping damage: a damage word within a window of a shipping word, in one sentence.
_DAMAGE_WORDS: FrozenSet[str] = frozenset(
    "damaged damage broken broke cracked crushed dented smashed shattered torn ripped wet "
    "soaked squashed bent".split()
)
# Shipping word -> how many tokens away a damage word may be.
_SHIPPING_CUES: Dict[str, int] = {
    **dict.fromkeys(
        "shipping shipped shipment transit delivery package packaging packaged parcel box "
        "boxes mail mailed courier carrier postal ups fedex usps".split(), 6
    ),
    **dict.fromkeys("arrived arrive arrives arrival received came delivered".split(), 4),
}
_NOT_A_SHIPPING_BOX = frozenset({"toe"})  # "toe box" is part of a shoe
_BREAK_IN_FOLLOWERS = frozenset({"half", "two", "pieces", "2", "parts", "transit", "shipping"})

_TOKEN = re.compile(r":-?[()]|[a-z0-9]+(?:'[a-z]+)?|[.!?;\n]+")


def _build_terms() -> Tuple[Dict[str, Tuple[float, str]], Dict[str, List[Tuple[Tuple[str, ...], float, str]]]]:
    words: Dict[str, Tuple[float, str]] = {}
    phrases: Dict[str, List[Tuple[Tuple[str, ...], float, str]]] = {}
    for aspect, text in _TERMS_BY_ASPECT.items():
        items = text.split()
        for term, weight_text in zip(items[::2], items[1::2]):
            weight = -float(weight_text[:-1]) if weight_text.endswith("-") else float(weight_text)
            parts = tuple(term.split("_"))
            if len(parts) == 1:
                words[term] = (weight, aspect)
            else:
                phrases.setdefault(parts[0], []).append((parts[1:], weight, aspect))
    for options in phrases.values():
        options.sort(key=lambda option: -len(option[0]))
    return words, phrases


_WORDS, _PHRASES = _build_terms()
_ASPECT_CUES: Dict[str, str] = {
    word: aspect for aspect, text in _ASPECT_CUES_BY_ASPECT.items() for word in text.split()
}


def lexicon_size() -> int:
    """Number of lexicon terms (words and phrases)."""
    return len(_WORDS) + sum(len(options) for options in _PHRASES.values())


class Analysis(NamedTuple):
    """What ``analyze`` found.

    Attributes:
        score: 1 (very negative) .. 5 (very positive).
        reasons: 1..3 short phrases, strongest first.
        shipping_damage: Whether the review reports damage in shipping.
        total: The summed weight the score derives from.
    """

    score: int
    reasons: List[str]
    shipping_damage: bool
    total: float


def _is_negator(token: str) -> bool:
    return token in _NEGATORS or token.endswith("n't")


def _tokenize(text: str) -> List[str]:
    return _TOKEN.findall(text.lower().replace("\u2019", "'"))


def _sentences(tokens: List[str]) -> List[int]:
    """Sentence number of each token (boundary tokens end their sentence)."""
    numbers, sentence = [], 0
    for token in tokens:
        numbers.append(sentence)
        if token[0] in ".!?;\n":
            sentence += 1
    return numbers


def _damage_positions(tokens: List[str], sentence_of: List[int]) -> List[int]:
    found = []
    for i, token in enumerate(tokens):
        if token not in _DAMAGE_WORDS:
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if token in ("broken", "broke") and nxt == "in":
            after = tokens[i + 2] if i + 2 < len(tokens) else ""
            if after not in _BREAK_IN_FOLLOWERS:
                continue  # "broken in": worn until comfortable
        if any(_is_negator(t) for t in tokens[max(0, i - 2):i]):
            continue  # "not damaged", "nothing broken"
        for j in range(max(0, i - 6), min(len(tokens), i + 7)):
            reach = _SHIPPING_CUES.get(tokens[j])
            if reach is None or abs(j - i) > reach or sentence_of[j] != sentence_of[i]:
                continue
            if tokens[j] in ("box", "boxes") and j > 0 and tokens[j - 1] in _NOT_A_SHIPPING_BOX:
                continue
            found.append(i)
            break
    return found


def has_shipping_damage(text: str) -> bool:
    """Whether ``text`` reports damage in shipping: a damage word ("damaged",
    "broken", "cracked", "crushed", "dented", "smashed", "torn", "wet", ...)
    not negated by the 2 tokens before it, within 6 tokens of a shipping word
    ("shipping", "transit", "package", "box", ...) or 4 of an arrival word
    ("arrived", "received", "came", ...) in the same sentence. "broken in"
    (of shoes) and "toe box" do not count."""
    tokens = _tokenize(text)
    return bool(_damage_positions(tokens, _sentences(tokens)))


def _nearest_cue(tokens: List[str], sentence_of: List[int], start: int, end: int) -> str:
    best, best_distance = "general", ASPECT_WINDOW + 1
    for j in range(max(0, start - ASPECT_WINDOW), min(len(tokens), end + ASPECT_WINDOW)):
        aspect = _ASPECT_CUES.get(tokens[j])
        if aspect is None or sentence_of[j] != sentence_of[start]:
            continue
        distance = start - j if j < start else j - end + 1
        if 0 < distance < best_distance:
            best, best_distance = aspect, distance
    return best


def analyze(text: str) -> Analysis:
    """Score a review (see the module docstring for how).

    Args:
        text: The review, any length; case and punctuation are free.

    Returns:
        The score, reasons and shipping-damage flag.
    """
    tokens = _tokenize(text)
    sentence_of = _sentences(tokens)
    damage = set(_damage_positions(tokens, sentence_of))
    # Matches: [weight, aspect, first token]; sentence_start indexes into it.
    matches: List[List] = []
    sentence_start = 0
    negation_left = intensity_left = 0
    intensity = contrast = 1.0
    i, n = 0, len(tokens)
    while i < n:
        token = tokens[i]
        if token[0] in ".!?;\n":
            negation_left = intensity_left = 0
            contrast = 1.0
            sentence_start = len(matches)
            i += 1
            continue
        length, entry = 1, None
        for rest, weight, aspect in _PHRASES.get(token, ()):
            if weight == 0 and i in damage:
                continue  # "arrived broken in two": the damage word counts
            if tuple(tokens[i + 1:i + 1 + len(rest)]) == rest:
                length, entry = 1 + len(rest), (weight, aspect)
                break
        if entry is None:
            entry = _WORDS.get(token)
        if entry is None:
            if _is_negator(token):
                negation_left = NEGATION_WINDOW
            elif token in _INTENSIFIERS:
                intensity, intensity_left = _INTENSIFIERS[token], INTENSIFIER_WINDOW
            elif token in _CONTRASTS:
                for match in matches[sentence_start:]:
                    match[0] *= BEFORE_CONTRAST
                contrast = AFTER_CONTRAST
            else:
                negation_left = max(0, negation_left - 1)
                intensity_left = max(0, intensity_left - 1)
            i += 1
            continue
        weight, aspect = entry
        if weight:
            if intensity_left:
                weight *= intensity
            if negation_left:
                weight *= NEGATION_FACTOR
            if i in damage:
                aspect = "damage"
            elif aspect == "general":
                aspect = _nearest_cue(tokens, sentence_of, i, i + length)
            matches.append([weight * contrast, aspect, i])
        negation_left = intensity_left = 0
        i += length

    total = sum(m[0] for m in matches) + (DAMAGE_WEIGHT if damage else 0.0)
    score = min(5, max(1, math.floor(3 + 2 * math.tanh(total / SCALE) + 0.5)))
    return Analysis(score, _reasons(matches, bool(damage)), bool(damage), total)


def _reasons(matches: List[List], damage: bool) -> List[str]:
    groups: Dict[Tuple[str, bool], List[float]] = {}  # -> [strength, first token]
    for weight, aspect, position in matches:
        if aspect == "damage" or weight == 0:
            continue
        group = groups.setdefault((aspect, weight > 0), [0.0, position])
        group[0] += abs(weight)
    ranked = sorted(groups.items(), key=lambda item: (-item[1][0], item[1][1]))
    reasons = [SHIPPING_DAMAGE] if damage else []
    reasons += [_REASONS[key] for key, _ in ranked]
    return reasons[:MAX_REASONS] or [NO_SENTIMENT]
