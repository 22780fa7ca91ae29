"""Generic questions of the kind people ask an assistant, none about anything in particular: the
query bank of the hubness correction (`VectorIndex.set_querybank`). A stored text close to many
of them (small talk, boilerplate, a greeting) is close to every question, unrelated ones
included; its scores are lowered by how close it is. The idea is query-bank normalisation
(Bogolin et al., CVPR 2022), applied here per row from its own vector.

Deliberately about no subject: the no-answer test's unrelated queries (bench/ranking.py) are
about 26 specific subjects and none of these.
"""

from __future__ import annotations

QUESTIONS: tuple[str, ...] = (
    'What should I do this weekend',
    'How can I be more productive at work',
    'What is a good gift for a friend',
    'Can you recommend a movie to watch tonight',
    'How do I fix this error',
    'What time is it in Tokyo',
    'Tell me something interesting',
    'How do I get better sleep',
    'What is the best way to learn a language',
    'Where should I travel next summer',
    'How do I write a cover letter',
    'What are some healthy breakfast ideas',
    'How do I save money each month',
    'What is the weather like tomorrow',
    'How do I stay motivated',
    'Why is my computer so slow',
    'How do I reset my password',
    'What is the meaning of this word',
    'How long does it take to get there',
    'Who is the author of that book',
    'What happened yesterday',
    'How do I start a small business',
    'What are the pros and cons',
    'Can you summarize this for me',
    'What is the difference between these two',
    'How much does it cost',
    'Is it safe to do this',
    'What do people usually do in this situation',
    'How do I apologise to someone',
    'What is a good hobby to pick up',
    'How do I clean a stain from a shirt',
    'Which phone should I buy',
    'How do I prepare for an interview',
    'What are the rules of this game',
    'How can I help a friend who is sad',
    'What should I cook for dinner',
    'How do I deal with stress',
    'What is the history of this place',
    'How do I make new friends',
    'What is the fastest way to commute',
    'How do I organise my files',
    'What does this error message mean',
    'When is the best time to visit',
    'How do I take care of a plant',
    'What is the capital of this country',
    'How do I improve my writing',
    'What should I read next',
    'How do I talk to my manager about a raise',
    'What is the plan for today',
    'How do I keep track of my tasks',
    'Why did this happen',
    'What are some fun things to do with kids',
    'How do I choose a good laptop',
    'What is trending right now',
    'How do I plan a party',
    'Where can I find more information',
    'How do I set a reminder',
    'What is a good exercise routine',
    'How do I know if I am ready',
    'What did we talk about last time',
)
