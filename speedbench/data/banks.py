"""Short texts written for the throughput builder: final instructions, exam questions,
creative briefs, needle facts and speaker names. The instruction always ends a prompt and
is never truncated."""
from __future__ import annotations

CODE_INSTRUCTIONS = (
    "The Python source above stops partway through. Continue it from the exact point where it "
    "stops, keeping the same style and naming, and write at least the next forty lines. Output "
    "only code.",
    "Pick up the code above exactly where it breaks off and keep writing it. Finish the current "
    "definition first, then add the next function the module would plausibly need. Output only "
    "Python code.",
    "The listing above was cut off. Continue writing the Python code from the cut, matching the "
    "indentation and conventions already in use, and do not repeat any earlier lines.",
)

SORT_INSTRUCTIONS = (
    "Sort every item in the list above in ascending alphabetical order, comparing characters by "
    "their ASCII codes. Output the sorted list only, one item per line with the leading dash, "
    "without skipping, merging or adding items.",
    "Rewrite the list above in sorted order (ascending, case-sensitive, character by character). "
    "Keep each entry exactly as written, one per line, and output nothing else.",
)

NEEDLE_PLACES = (
    "north archive room", "basement server cage", "harbor storage unit", "rooftop weather station",
    "east wing laboratory", "old printing workshop", "river pumping house", "observatory dome",
    "third floor reading room", "greenhouse annex", "cold storage vault", "signal tower cabin",
)
NEEDLE_WORDS = (
    "amber", "cobalt", "juniper", "falcon", "marble", "saffron", "tundra", "willow", "quartz",
    "lantern", "orchid", "meridian", "pebble", "comet", "harvest", "nimbus",
)
NEEDLE_FACT = "Note for staff: the access code for the {place} is {code}. Do not write it anywhere else."
NEEDLE_QUESTION = (
    "One of the passages above contains an access code for the {place}. Based only on the text "
    "above, what is that access code? Reply with the code exactly as written, then quote the "
    "sentence that contains it."
)

EXAM_INTRO = "Final exam. Answer every question below. Show brief working, then state each answer clearly.\n"
EXAM_QUESTIONS = (
    "A train leaves at 09:40 and arrives at 13:15. How long is the journey in minutes?",
    "Which is larger, 3/8 or 0.4? Explain how you compared them.",
    "Name the process by which green plants turn light, water and carbon dioxide into sugar.",
    "A rectangle has a perimeter of 30 cm and one side of 6 cm. What is its area?",
    "What is the main difference between weather and climate?",
    "Simplify the expression 4(x + 3) - 2(x - 5).",
    "Why does a metal spoon feel colder than a wooden spoon at the same room temperature?",
    "In Python, what does the expression len({1, 2, 2, 3}) evaluate to, and why?",
    "A shop discounts a 80-euro jacket by 25 percent and then adds 10 percent tax. What is the final price?",
    "Explain in two sentences what a hash table is used for.",
    "What is the median of the numbers 7, 2, 9, 4, 4, 11?",
    "Which gas makes up most of the Earth's atmosphere?",
    "If a fair die is rolled twice, what is the probability that both rolls are even?",
    "Give one advantage and one disadvantage of renewable energy from wind.",
    "Convert 2.5 kilometres to metres and to centimetres.",
    "What is the difference between a list and a tuple in Python?",
    "Solve for x: 5x - 7 = 3x + 9.",
    "Why do we see lightning before we hear thunder?",
    "Describe what a binary search needs from its input, and its running time.",
    "A recipe for 4 people uses 300 g of flour. How much flour is needed for 10 people?",
    "What is the role of a catalyst in a chemical reaction?",
    "Write the number 0.00052 in scientific notation.",
    "What is the sum of the interior angles of a hexagon?",
    "Explain the difference between speed and velocity.",
)

CREATIVE_BRIEFS = (
    "Using the material above only as loose inspiration, write an original short story of about "
    "800 words about a lighthouse keeper who receives letters from someone who does not exist yet. "
    "Use vivid sensory detail and at least three lines of dialogue.",
    "Draw on any images from the notes above and write a new poem cycle of five poems about a city "
    "waking up, each poem from the point of view of a different object.",
    "Write the opening chapter of a novel (around 900 words) set in a mountain village where the "
    "clocks all stopped on the same night. Borrow moods from the notes above, but invent the plot.",
    "Write a fable for adults, about 700 words, in which a careful librarian and a reckless inventor "
    "must share a single workshop for one winter. End with an unexpected moral.",
    "Compose a series of twelve diary entries by a deep-sea research diver who slowly realises the "
    "ocean is answering her. Let the voice change as the entries go on.",
    "Invent a myth that explains why rivers bend. Tell it as an elder would tell it to children at "
    "night, in about 600 words, with a refrain that repeats three times.",
    "Write a short science-fiction story told entirely through messages left on a shared kitchen "
    "noticeboard aboard a generation ship.",
    "Write a humorous travel essay about a journey that goes wrong in small, escalating ways. Keep "
    "the tone warm, and use at least one running joke.",
)

DIALOGUE_PAIRS = (
    ("Mara", "Teodor"), ("Ines", "Kofi"), ("Lena", "Ravi"), ("Odile", "Bram"),
    ("Yusuf", "Clara"), ("Nadia", "Piet"), ("Tomas", "Aiko"), ("Greta", "Samir"),
)
DIALOGUE_INTRO = (
    "The following is a long, unscripted conversation between {a} and {b}, two old colleagues who "
    "meet every evening to read passages aloud to each other and argue about them.\n\n"
)
DIALOGUE_INSTRUCTION = (
    "Continue the conversation above between {a} and {b}. Write the next twelve turns, "
    "alternating speakers and starting with whoever did not speak last. Each turn should be "
    "one to three sentences, keep each person's voice, and let the conversation arrive at a surprising decision."
)
