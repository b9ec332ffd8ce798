"""Fixed word lists and query templates of the ``esci-synth`` benchmark (paper App. B.1).

Everything here is constant: it does not depend on the data seed. The generator
(:mod:`regionfed.data.esci_synth`) draws from these lists.

Contents:

* 24 product categories (paper B.1: "a 24-category product taxonomy"), each with product nouns,
  brands and category words; shared attribute lists (colors, sizes, materials, modifiers) and
  locations.
* Query templates, several per intent (paper B.1.6: "intent-specific query templates with
  product/brand/modifier slots").
* The concept-shift inventory (not in the paper; docs/models.md): ambiguous words with a default and
  an alternative sense, templates with a default and an alternative intent, and American/British
  spelling pairs.
* A deterministic generator of pronounceable generic pseudo-words that pads the vocabulary to
  ``vocab_size`` (paper B.1.6: "padded to 5,000 with generic tokens").

Invariants (checked by :func:`lexicon_problems`): every word is lowercase ``a-z`` with at least
two letters; every entity word belongs to exactly one lexicon entry of one entity type (so its
NER tag and its B-/I- position are fixed); template literal words are never entity words; the
ambiguous words occur only through the concept-shift inventory; and no two templates have the
same slot/literal pattern, so a source text determines its template (hence its intent) within
one labelling profile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from regionfed.data.queries import INTENTS

# --------------------------------------------------------------------------------------------
# Categories and regional preferences (paper Table 5)
# --------------------------------------------------------------------------------------------

#: The 24 product categories. The first 13 are the preferred categories of paper Table 5.
CATEGORIES: tuple[str, ...] = (
    "electronics", "gaming", "fashion", "apparel", "grocery", "food", "sports", "fitness",
    "books", "home", "garden", "beauty", "health",
    "toys", "automotive", "pets", "office", "baby", "music", "movies", "tools", "jewelry",
    "kitchen", "outdoors",
)

#: Paper Table 5: region slug → preferred categories C_r (8-region configuration).
TABLE5_PREFERENCES: dict[str, tuple[str, ...]] = {
    "urban_tech": ("electronics", "gaming"),
    "young_demo": ("fashion", "apparel"),
    "high_income": ("fashion", "electronics"),
    "price_conscious": ("grocery", "food"),
    "active_lifestyle": ("sports", "fitness"),
    "business_prof": ("apparel", "books"),
    "suburban": ("home", "garden"),
    "premium_markets": ("beauty", "health"),
}

# --------------------------------------------------------------------------------------------
# Slots and entity types
# --------------------------------------------------------------------------------------------

#: Slots whose fillers come from the query's category lexicon.
CATEGORY_SLOTS: tuple[str, ...] = ("product", "brand", "category")
#: Slots whose fillers are shared by all categories.
SHARED_SLOTS: tuple[str, ...] = ("modifier", "color", "size", "material", "location")
#: Entity type (NER) of the words that fill each slot.
SLOT_ENTITY: dict[str, str] = {
    "product": "PRODUCT",
    "brand": "BRAND",
    "category": "CATEGORY",
    "modifier": "MODIFIER",
    "color": "MODIFIER",
    "size": "MODIFIER",
    "material": "MODIFIER",
    "location": "LOCATION",
}


@dataclass(frozen=True)
class CategoryLexicon:
    """Entries of one category; an entry is one word or a space-separated multi-word entity."""

    products: tuple[str, ...]
    brands: tuple[str, ...]
    category_words: tuple[str, ...]

    def slot(self, name: str) -> tuple[str, ...]:
        return {"product": self.products, "brand": self.brands,
                "category": self.category_words}[name]


def _lex(products: str, brands: str, words: str) -> CategoryLexicon:
    def split(s: str) -> tuple[str, ...]:
        return tuple(e.strip() for e in s.split(",") if e.strip())

    return CategoryLexicon(split(products), split(brands), split(words))


CATEGORY_LEXICONS: dict[str, CategoryLexicon] = {
    "electronics": _lex(
        "laptop, tablet, headphones, charger, monitor, speaker, smartwatch, router, webcam, "
        "usb cable",
        "samsung, sony, dell, lenovo, asus, logitech, western digital",
        "electronics, gadgets"),
    "gaming": _lex(
        "console, controller, joystick, gamepad, vr headset, graphics card, racing wheel, "
        "keycaps, mousepad, arcade stick",
        "nintendo, xbox, playstation, razer, turtle beach, steelseries",
        "gaming, videogames, esports"),
    "fashion": _lex(
        "handbag, sunglasses, scarf, wallet, belt, sneakers, heels, sandals, tote, clutch, "
        "loafers",
        "gucci, prada, zara, calvin klein, ralph lauren, michael kors",
        "fashion, designer, accessories"),
    "apparel": _lex(
        "shirt, jeans, jacket, hoodie, sweater, dress, shorts, leggings, socks, pajamas, "
        "blazer, coat",
        "levis, uniqlo, hanes, wrangler, eddie bauer",
        "apparel, clothing, clothes"),
    "grocery": _lex(
        "bread, milk, eggs, rice, cereal, coffee, butter, cheese, yogurt, olive oil",
        "kelloggs, nestle, heinz, trader joes, general mills, danone",
        "grocery, groceries, pantry"),
    "food": _lex(
        "pizza, pasta, chips, cookies, chocolate, granola, salsa, popcorn, crackers, noodles, "
        "jerky",
        "doritos, oreo, pringles, lindt, barilla, ben jerrys",
        "food, snacks, gourmet"),
    "sports": _lex(
        "basketball, football, tennis racket, soccer ball, baseball glove, helmet, jersey, "
        "skateboard, golf clubs, hockey puck, volleyball, shinguards",
        "nike, adidas, wilson, spalding, rawlings",
        "sports, athletics, sporting goods"),
    "fitness": _lex(
        "dumbbells, kettlebell, treadmill, yoga mat, resistance bands, jump rope, "
        "protein powder, foam roller, barbell, exercise bike",
        "peloton, bowflex, fitbit, gaiam, optimum nutrition",
        "fitness, workout, gym"),
    "books": _lex(
        "novel, cookbook, textbook, biography, paperback, hardcover, audiobook, comics, "
        "dictionary, atlas, memoir, ereader",
        "penguin, scholastic, harpercollins, random house, wiley, oreilly",
        "books, literature, bestsellers"),
    "home": _lex(
        "sofa, lamp, curtains, rug, pillow, blanket, mattress, bookshelf, mirror, vase, duvet, "
        "picture frame",
        "ikea, wayfair, pottery barn, casper, serta, dyson",
        "home, furniture, decor"),
    "garden": _lex(
        "shovel, rake, hose, planter, lawn mower, seeds, fertilizer, wheelbarrow, trowel, "
        "sprinkler, bird feeder, pruning shears",
        "scotts, miracle gro, fiskars, husqvarna, toro, greenworks",
        "garden, gardening, landscaping"),
    "beauty": _lex(
        "lipstick, mascara, foundation, perfume, moisturizer, shampoo, conditioner, "
        "nail polish, eyeliner, serum, eye cream",
        "loreal, maybelline, revlon, clinique, estee lauder",
        "beauty, cosmetics, makeup, skincare"),
    "health": _lex(
        "vitamins, pain reliever, thermometer, bandages, first aid kit, toothpaste, "
        "toothbrush, sunscreen, allergy medicine, probiotics, blood pressure cuff",
        "tylenol, advil, colgate, nature made, centrum, neutrogena",
        "health, wellness, pharmacy"),
    "toys": _lex(
        "puzzle, action figure, doll, board game, stuffed animal, blocks, kite, yoyo, slime, "
        "playdough, dollhouse",
        "lego, mattel, hasbro, hot wheels, melissa doug, nerf",
        "toys, kids"),
    "automotive": _lex(
        "tire, wiper blades, car battery, coolant, headlights, brake pads, floor mats, "
        "seat covers, dashcam, jumper cables",
        "bosch, michelin, goodyear, castrol, armorall, meguiars",
        "automotive, auto"),
    "pets": _lex(
        "kibble, cat litter, leash, collar, fish tank, aquarium, chew toy, birdcage, "
        "scratching post, harness, catnip",
        "purina, pedigree, kong, iams, petsafe, science diet",
        "pets, petcare, pet supplies"),
    "office": _lex(
        "stapler, notebook, printer, pens, pencils, binder, sticky notes, paper shredder, "
        "whiteboard, calculator, organizer, envelopes, file cabinet",
        "sharpie, bic, moleskine, avery, hp, epson",
        "office, stationery"),
    "baby": _lex(
        "stroller, diapers, crib, onesie, carseat, pacifier, bib, high chair, formula, rattle, "
        "bottles",
        "pampers, huggies, graco, gerber, chicco",
        "baby, nursery, infant"),
    "music": _lex(
        "guitar, piano, ukulele, violin, drums, microphone, amplifier, vinyl, metronome, "
        "harmonica",
        "fender, yamaha, gibson, roland, taylor",
        "music, instruments"),
    "movies": _lex(
        "dvd, bluray, box set, projector, movie poster, documentary, anime, miniseries, "
        "film reel",
        "disney, pixar, warner bros, criterion, lionsgate, paramount",
        "movies, films, cinema"),
    "tools": _lex(
        "drill, hammer, screwdriver, wrench, tape measure, saw, pliers, toolbox, sockets, "
        "sander, ladder",
        "dewalt, makita, milwaukee, ryobi, craftsman",
        "tools, hardware, diy"),
    "jewelry": _lex(
        "necklace, bracelet, earrings, pendant, engagement ring, anklet, brooch, locket, "
        "cufflinks, tiara",
        "pandora, tiffany, swarovski, kay, cartier, david yurman",
        "jewelry, jewels"),
    "kitchen": _lex(
        "blender, toaster, skillet, espresso machine, chef knife, spatula, mixing bowl, "
        "air fryer, kettle, dutch oven, colander",
        "kitchenaid, cuisinart, le creuset, ninja, oxo, pyrex",
        "kitchen, cookware, kitchenware"),
    "outdoors": _lex(
        "tent, sleeping bag, backpack, lantern, hammock, cooler, compass, hiking boots, "
        "binoculars, camp stove, canteen, flashlight",
        "coleman, north face, patagonia, osprey, yeti, columbia",
        "outdoors, camping, wilderness"),
}

#: Shared attribute and location entries (MODIFIER and LOCATION entities).
SHARED_LEXICONS: dict[str, tuple[str, ...]] = {
    "modifier": (
        "cheap", "best", "new", "used", "premium", "budget", "luxury", "organic", "vintage",
        "portable", "wireless", "waterproof", "durable", "affordable", "refurbished",
        "favorite", "cozy", "lightweight", "handmade", "eco friendly",
    ),
    "color": (
        "red", "blue", "black", "white", "green", "pink", "purple", "brown", "beige", "navy",
        "gray", "silver", "gold", "yellow", "teal", "maroon",
    ),
    "size": (
        "small", "medium", "large", "xl", "xxl", "petite", "king", "queen", "twin", "jumbo",
        "extra wide", "plus size",
    ),
    "material": (
        "cotton", "leather", "wool", "silk", "denim", "stainless steel", "plastic", "glass",
        "ceramic", "bamboo", "aluminum", "linen", "nylon", "polyester", "cashmere", "velvet",
        "suede",
    ),
    "location": (
        "online", "nearby", "local", "downtown", "uptown", "mall", "outlet", "walmart",
        "costco", "kroger", "walgreens", "bestbuy", "shopping center",
    ),
}

# --------------------------------------------------------------------------------------------
# Templates (paper B.1.6) and template concept shift (not in the paper)
# --------------------------------------------------------------------------------------------

_SLOT_RE = re.compile(r"^\{(\w+)\}$")


@dataclass(frozen=True)
class Template:
    """A query template: literal words (tagged O) and ``{slot}`` placeholders.

    ``alt_intent`` is set for the templates of the concept-shift inventory: where the template
    is shifted, some profiles label it with ``alt_intent`` instead of ``intent``.
    """

    id: str
    intent: str
    pattern: str
    alt_intent: str | None = None

    @property
    def units(self) -> tuple[tuple[str, str], ...]:
        """``("slot", name)`` or ``("lit", word)`` per whitespace-separated pattern part."""
        out = []
        for part in self.pattern.split():
            m = _SLOT_RE.match(part)
            out.append(("slot", m.group(1)) if m else ("lit", part))
        return tuple(out)

    @property
    def signature(self) -> tuple[str, ...]:
        """The pattern as classes: a slot name or ``=literal``. Distinct signatures ⇒ the two
        templates can never render the same text (entity pools and literals are disjoint)."""
        return tuple(v if k == "slot" else f"={v}" for k, v in self.units)


_TEMPLATE_TEXT: dict[str, tuple[tuple[str, str | None], ...]] = {
    "product_search": (
        ("{product}", None),
        ("{brand} {product}", "brand_lookup"),
        ("{modifier} {product}", None),
        ("find {product}", None),
        ("buy {color} {product}", None),
        ("shop {material} {product}", None),
    ),
    "price_comparison": (
        ("how much is {product}", None),
        ("{product} price", "deal_hunting"),
        ("compare {brand} {product} prices", None),
        ("{product} vs {product}", None),
        ("cost of {modifier} {product}", None),
        ("cheapest {product} {location}", None),
    ),
    "brand_lookup": (
        ("{brand}", None),
        ("{brand} official store", None),
        ("{brand} products", None),
        ("items by {brand}", None),
        ("{brand} {category}", "category_browse"),
    ),
    "category_browse": (
        ("{category}", None),
        ("browse {category}", None),
        ("{modifier} {category}", None),
        ("{category} department", None),
        ("shop all {category}", None),
        ("{color} {category}", None),
    ),
    "specific_item": (
        ("{brand} {product} {size}", None),
        ("{brand} {product} {color} {size}", None),
        ("{brand} {product} model number", None),
        ("{material} {product} in {color}", None),
        ("{brand} {color} {material} {product}", None),
        ("{product} {size} {color} color", None),
    ),
    "deal_hunting": (
        ("{product} deals", "price_comparison"),
        ("{brand} coupon", None),
        ("{category} sale", "category_browse"),
        ("{modifier} {product} discount", None),
        ("{product} clearance {location}", None),
        ("promo code for {brand} {product}", None),
    ),
    "review_reading": (
        ("{product} reviews", None),
        ("{brand} {product} reviews", "specific_item"),
        ("is {brand} {product} worth it", None),
        ("{product} ratings", None),
        ("{modifier} {product} customer opinions", None),
        ("highest rated {category}", None),
    ),
    "availability_check": (
        ("{product} in stock", None),
        ("{product} {location}", "product_search"),
        ("{brand} {product} available {location}", None),
        ("is {product} available", None),
        ("{product} pickup today", None),
        ("where to buy {brand} {product}", None),
    ),
}

#: All templates; ids are ``"<intent>/<k>"`` with the template's default intent.
TEMPLATES: tuple[Template, ...] = tuple(
    Template(f"{intent}/{k}", intent, text, alt)
    for intent in INTENTS
    for k, (text, alt) in enumerate(_TEMPLATE_TEXT[intent])
)

#: The templates of the concept-shift inventory (intent depends on the region when shifted).
SHIFTABLE_TEMPLATES: tuple[Template, ...] = tuple(t for t in TEMPLATES if t.alt_intent)

# --------------------------------------------------------------------------------------------
# Concept-shift inventory: ambiguous words and regional spellings (not in the paper)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sense:
    """One meaning of an ambiguous word: the slot it fills and, for category slots, the category
    whose lexicon it joins (``None`` for the shared attribute lists)."""

    slot: str
    category: str | None = None

    @property
    def entity(self) -> str:
        return SLOT_ENTITY[self.slot]


@dataclass(frozen=True)
class AmbiguousWord:
    """A word whose entity type depends on the region when it is shifted.

    Unshifted, only ``default`` occurs. Shifted, profiles that prefer ``alternative.category``
    use the alternative sense and all others the default sense.
    """

    word: str
    default: Sense
    alternative: Sense


AMBIGUOUS_WORDS: tuple[AmbiguousWord, ...] = (
    AmbiguousWord("apple", Sense("brand", "electronics"), Sense("product", "grocery")),
    AmbiguousWord("jaguar", Sense("brand", "automotive"), Sense("product", "gaming")),
    AmbiguousWord("dove", Sense("brand", "beauty"), Sense("product", "garden")),
    AmbiguousWord("puma", Sense("brand", "sports"), Sense("product", "books")),
    AmbiguousWord("orange", Sense("color"), Sense("product", "food")),
    AmbiguousWord("crane", Sense("product", "toys"), Sense("brand", "home")),
    AmbiguousWord("nest", Sense("brand", "electronics"), Sense("product", "garden")),
    AmbiguousWord("polo", Sense("product", "apparel"), Sense("brand", "fashion")),
    AmbiguousWord("vans", Sense("product", "automotive"), Sense("brand", "fashion")),
    AmbiguousWord("echo", Sense("product", "electronics"), Sense("brand", "garden")),
)

#: (American, British) spelling pairs. The American form is the one in the lexicon/templates.
SPELLING_PAIRS: tuple[tuple[str, str], ...] = (
    ("color", "colour"),
    ("gray", "grey"),
    ("tire", "tyre"),
    ("aluminum", "aluminium"),
    ("jewelry", "jewellery"),
    ("center", "centre"),
    ("favorite", "favourite"),
    ("organizer", "organiser"),
    ("pajamas", "pyjamas"),
    ("cozy", "cosy"),
)

# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


def entries(slot: str, category: str | None = None) -> tuple[str, ...]:
    """Base entries of a slot (without the ambiguous words)."""
    if slot in CATEGORY_SLOTS:
        if category is None:
            raise ValueError(f"slot {slot!r} needs a category")
        return CATEGORY_LEXICONS[category].slot(slot)
    return SHARED_LEXICONS[slot]


def _all_entries() -> list[tuple[str, str, str | None]]:
    """(entry, slot, category) for every base entry."""
    out: list[tuple[str, str, str | None]] = []
    for cat in CATEGORIES:
        for slot in CATEGORY_SLOTS:
            out.extend((e, slot, cat) for e in entries(slot, cat))
    for slot in SHARED_SLOTS:
        out.extend((e, slot, None) for e in entries(slot))
    return out


def literal_words() -> frozenset[str]:
    """Every literal (O-tagged) template word."""
    return frozenset(v for t in TEMPLATES for k, v in t.units if k == "lit")


@cache
def domain_words() -> frozenset[str]:
    """All domain words: entity words, template literals, ambiguous words, both spellings."""
    words: set[str] = set(literal_words())
    for entry, _, _ in _all_entries():
        words.update(entry.split())
    words.update(a.word for a in AMBIGUOUS_WORDS)
    for us, gb in SPELLING_PAIRS:
        words.update((us, gb))
    return frozenset(words)


_ONSETS = ("b", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "dr", "fr", "gl", "gr", "kl", "pl", "pr", "sk", "sl", "sn", "st", "tr", "ch",
           "sh", "th")
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ee", "oo", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "k", "t", "x")


@cache
def _generic_sequence(n: int) -> tuple[str, ...]:
    syllables = [o + v + c for o in _ONSETS for v in _NUCLEI for c in _CODAS]
    s = len(syllables)
    total = s * s
    step = 2_654_435_761 % total  # a fixed stride coprime with ``total`` visits every pair once
    while _gcd(step, total) != 1:
        step += 1
    exclude = domain_words()
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while len(out) < n and i < total:
        k = (i * step + 12345) % total
        word = syllables[k // s] + syllables[k % s]
        i += 1
        if word in seen or word in exclude:
            continue
        seen.add(word)
        out.append(word)
    if len(out) < n:  # pragma: no cover - about 10^7 candidates exist
        raise ValueError(f"cannot make {n} generic words")
    return tuple(out)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def generic_words(n: int) -> list[str]:
    """The first ``n`` generic pseudo-words (pronounceable, two syllables, never a domain word).

    Deterministic and independent of any seed; ``generic_words(n)`` is a prefix of
    ``generic_words(n + 1)``.
    """
    if n <= 0:
        return []
    return list(_generic_sequence(int(n)))


# --------------------------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------------------------

_WORD_RE = re.compile(r"^[a-z]{2,}$")


def lexicon_problems() -> list[str]:
    """Return every violated lexicon invariant (empty when the lexicon is consistent)."""
    problems: list[str] = []
    problems += _check_counts()
    problems += _check_words()
    problems += _check_inventory()
    problems += _check_templates()
    return problems


def _check_counts() -> list[str]:
    out = []
    if len(CATEGORIES) != 24 or set(CATEGORY_LEXICONS) != set(CATEGORIES):
        out.append("expected the same 24 categories in CATEGORIES and CATEGORY_LEXICONS")
    for cat, lex in CATEGORY_LEXICONS.items():
        for slot, need in (("product", 8), ("brand", 4), ("category", 2)):
            if len(lex.slot(slot)) < need:
                out.append(f"{cat}: fewer than {need} {slot} entries")
    for slot, pool in [(s, entries(s, c)) for c in CATEGORIES for s in CATEGORY_SLOTS] + [
        (s, entries(s)) for s in SHARED_SLOTS
    ]:
        if not any(" " not in e for e in pool):
            out.append(f"{slot}: a pool without single-word entries")
    return out


def _check_words() -> list[str]:
    out = []
    owner: dict[str, str] = {}
    for entry, slot, cat in _all_entries():
        for w in entry.split():
            if not _WORD_RE.match(w):
                out.append(f"bad word {w!r}")
            if w in owner:
                out.append(f"word {w!r} is in {owner[w]} and in {slot}:{cat}:{entry!r}")
            owner[w] = f"{slot}:{cat}:{entry!r}"
    for w in literal_words():
        if not _WORD_RE.match(w):
            out.append(f"bad literal {w!r}")
        if w in owner:
            out.append(f"literal {w!r} is also an entity word ({owner[w]})")
    for a in AMBIGUOUS_WORDS:
        if a.word in owner or a.word in literal_words():
            out.append(f"ambiguous word {a.word!r} is also in the base lexicon")
    return out


def _check_inventory() -> list[str]:
    out = []
    known = {w for e, _, _ in _all_entries() for w in e.split()} | literal_words()
    for a in AMBIGUOUS_WORDS:
        if a.default.entity == a.alternative.entity:
            out.append(f"ambiguous word {a.word!r}: both senses have the same entity type")
        for sense in (a.default, a.alternative):
            if (sense.slot in CATEGORY_SLOTS) != (sense.category is not None):
                out.append(f"ambiguous word {a.word!r}: bad sense {sense}")
    for us, gb in SPELLING_PAIRS:
        if us not in known:
            out.append(f"spelling {us!r} never occurs in the lexicon")
        if gb in known:
            out.append(f"British spelling {gb!r} is also a lexicon word")
    if len(AMBIGUOUS_WORDS) < 8 or len(SHIFTABLE_TEMPLATES) < 6 or len(SPELLING_PAIRS) < 6:
        out.append("concept-shift inventory too small")
    return out


def _check_templates() -> list[str]:
    out = []
    sigs: dict[tuple[str, ...], str] = {}
    for t in TEMPLATES:
        for kind, v in t.units:
            if kind == "slot" and v not in SLOT_ENTITY:
                out.append(f"template {t.id}: unknown slot {v!r}")
        if t.signature in sigs:
            out.append(f"templates {sigs[t.signature]} and {t.id} have the same pattern")
        sigs[t.signature] = t.id
        if t.alt_intent is not None and t.alt_intent not in INTENTS:
            out.append(f"template {t.id}: unknown alternative intent {t.alt_intent!r}")
    for intent in INTENTS:
        fixed = [t for t in TEMPLATES if t.intent == intent and t.alt_intent is None]
        if sum(1 for t in TEMPLATES if t.intent == intent) < 4 or not fixed:
            out.append(f"intent {intent}: fewer than 4 templates or none unshiftable")
        if min((len(t.units) for t in fixed), default=99) > 4:
            out.append(f"intent {intent}: no unshiftable template fits in 4 tokens")
    return out
